#!/bin/sh
# tests/e2e/nspawn.sh: profd installed the way a package would install it and run by a booted
# systemd, in a systemd-nspawn container (a debootstrapped Debian 12): socket activation,
# the unit's user, capabilities and system call filter, attach and slice, reload with a good
# and a bad configuration, journal priorities, stop. Exit 0 if every check passed.
#
# Not in the default suite: the first run downloads a Debian base system (debootstrap) and
# takes a few minutes. As root, from the repository:
#     tests/e2e/nspawn.sh            # ROOT=/var/tmp/profd-nspawn is kept for the next run
#     tests/e2e/nspawn.sh --mirror   # only print the package mirror it would use
# The packages come from the mirror this machine's own APT uses (MIRROR=URL overrides it):
# no mirror is named here.
set -eu
cd "$(dirname "$0")/../.."
root=${ROOT:-/var/tmp/profd-nspawn}
bld=build-e2e
suite=bookworm

# URIs of the enabled "deb" sources in APT's configuration that carry suite $1, one a line,
# in the order APT reads them: sources.list, then sources.list.d/*.list (one-line format:
# deb [options] URI SUITE COMPONENTS...) and *.sources (deb822 stanzas: Types, URIs, Suites,
# Enabled; field names in any case, values continued on indented lines). Other file names
# are ignored, as APT ignores them. With $1 empty: sources of any release suite (one without
# a dash: not -security, -updates or -backports), for a host of another release (a Debian
# mirror carries every suite). APT_ETC (default /etc/apt) is for trying the parsing out.
apt_uris() {
    etc=${APT_ETC:-/etc/apt}
    for f in "$etc/sources.list" "$etc"/sources.list.d/*.list "$etc"/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        case $f in
        *.sources)
            awk -v want="$1" '
                function has(list, word,   w, n, i) {
                    n = split(list, w, /[ \t]+/)
                    for (i = 1; i <= n; i++)
                        if (w[i] != "" && (w[i] == word || (word == "" && w[i] !~ /-/)))
                            return 1
                    return 0
                }
                function flush(   u, n, i) {
                    if (tolower(v["enabled"]) !~ /^[ \t]*no[ \t]*$/ && has(v["types"], "deb") &&
                        has(v["suites"], want)) {
                        n = split(v["uris"], u, /[ \t]+/)
                        for (i = 1; i <= n; i++)
                            if (u[i] != "")
                                print u[i]
                    }
                    split("", v)
                }
                /^#/ { next }
                /^[ \t]*$/ { flush(); next }
                /^[ \t]/ { v[key] = v[key] " " $0; next }
                {
                    key = tolower(substr($0, 1, index($0, ":") - 1))
                    v[key] = substr($0, index($0, ":") + 1)
                }
                END { flush() }' "$f"
            ;;
        *)
            awk -v want="$1" '
                { sub(/#.*/, ""); gsub(/\[[^]]*\]/, "") }
                $1 == "deb" && $3 != "" && ($3 == want || (want == "" && $3 !~ /-/)) { print $2 }
            ' "$f"
            ;;
        esac
    done
}

# The first URI debootstrap can use (a URL it fetches itself: not cdrom: or mirror+...),
# for $suite, else for any release suite.
host_mirror() {
    for want in "$suite" ""; do
        m=$(apt_uris "$want" | awk '/^(https?|ftp|file):/ { sub(/\/+$/, ""); print; exit }')
        if [ -n "$m" ]; then
            echo "$m"
            return 0
        fi
    done
    return 1
}

mirror=${MIRROR:-$(host_mirror || true)}
if [ "${1:-}" = --mirror ]; then
    echo "${mirror:-none}"
    [ -n "$mirror" ]
    exit
fi
if [ -z "$mirror" ]; then
    echo "nspawn.sh: no Debian package mirror in /etc/apt/sources.list{,.d}: set MIRROR=URL" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
command -v systemd-nspawn >/dev/null && command -v debootstrap >/dev/null ||
    apt-get install -y -qq systemd-container debootstrap >/dev/null
if [ ! -x "$root/usr/bin/systemctl" ]; then
    echo "debootstrap $suite from $mirror (this machine's APT source)"
    debootstrap --variant=minbase \
        --include=systemd,systemd-sysv,dbus,libunwind8,libev4,libcjson1,libdw1,libelf1,util-linux,libcurl4,libprotobuf-c1,ca-certificates,libbpf1,python3 \
        "$suite" "$root" "$mirror" >/dev/null
fi
# (A root made before the exporters: their libraries; before the Python frames' eBPF
# program: libbpf, and a Python to profile.)
[ -e "$root/usr/lib/x86_64-linux-gnu/libprotobuf-c.so.1" ] ||
    chroot "$root" apt-get install -y -qq libcurl4 libprotobuf-c1 ca-certificates >/dev/null
[ -e "$root/usr/lib/x86_64-linux-gnu/libbpf.so.1" ] && [ -x "$root/usr/bin/python3" ] ||
    chroot "$root" apt-get install -y -qq libbpf1 python3 >/dev/null
[ -f "$bld/build.ninja" ] || meson setup --prefix=/usr "$bld" >/dev/null
ninja -C "$bld" >/dev/null
DESTDIR="$root" meson install -C "$bld" --no-rebuild >/dev/null
cp "$bld/tests/programs/busy" "$root/usr/local/bin/profd-e2e-busy"
rm -f "$root/var/log/profd-e2e.log"

cat >"$root/usr/local/bin/profd-e2e" <<'EOF'
#!/bin/sh
# Runs inside the container at boot; writes /var/log/profd-e2e.log, then powers off.
exec >/var/log/profd-e2e.log 2>&1
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
check() { what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
systemd-sysusers
systemd-tmpfiles --create
systemctl daemon-reload
systemctl enable --now profd.socket
check "profd.socket listens on /run/profd/profd.sock, group profd, mode 0660" \
    test "$(stat -c '%G %a' /run/profd/profd.sock)" = "profd 660"
check "profd.service not started before the first connection" \
    sh -c '! systemctl is-active -q profd.service'
/usr/local/bin/profd-e2e-busy 2 >/dev/null &
busy=$!
sleep 0.3
check "the first connection starts profd (socket activation)" profctl status
check "profd.service is active" systemctl is-active -q profd.service
main=$(systemctl show -p MainPID --value profd.service)
check "it runs as user profd" test "$(awk '/^Uid:/ {print $2}' /proc/"$main"/status)" = "$(id -u profd)"
check "with CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_PERFMON, CAP_BPF and CAP_CHECKPOINT_RESTORE only" \
    test "$(grep CapEff /proc/"$main"/status | awk '{print $2}')" = "$(printf '%016x' $(( (1 << 19) | (1 << 2) | (1 << 38) | (1 << 39) | (1 << 40) )))"
check "attach" profctl attach "$busy" --hz 199
check "attach (cputime: perf events under the unit's filter)" sh -c "profctl configure $busy --mode cputime && sleep 2"
profctl slice "$busy" --last 2 -o /tmp/p.folded --top 0
check "slice: the busy program's functions, symbolized" grep -q 'work_alpha;spin' /tmp/p.folded
# The unprivileged helpers that parsed them: profd's children, profd's user, no capability
# (the bounding set stays the unit's: dropping it needs CAP_SETPCAP, and no_new_privs keeps
# it from mattering), no_new_privs, seccomp filter mode (the unit's filter and their own).
helpers=0
for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = profd-symbolize ] || continue
    helpers=$((helpers + 1))
    echo "--- helper ${p#/proc/}: $(tr '\0' ' ' <"$p/cmdline")"
    grep -E '^(PPid|Uid|Gid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp|Seccomp_filters):' "$p/status"
    check "helper ${p#/proc/}: a child of profd" test "$(awk '/^PPid:/ {print $2}' "$p/status")" = "$main"
    check "helper ${p#/proc/}: user profd" test "$(awk '/^Uid:/ {print $2 $3 $4 $5}' "$p/status")" = "$(id -u profd)$(id -u profd)$(id -u profd)$(id -u profd)"
    check "helper ${p#/proc/}: no capability (effective, permitted, inheritable, ambient)" \
        test "$(awk '/^Cap(Inh|Prm|Eff|Amb):/ {printf "%s", $2}' "$p/status")" = 0000000000000000000000000000000000000000000000000000000000000000
    check "helper ${p#/proc/}: no_new_privs, seccomp filter mode" \
        test "$(awk '/^(NoNewPrivs|Seccomp):/ {printf "%s", $2}' "$p/status")" = 12
done
check "two helpers (ELF headers for sampling, symbols for slices)" test "$helpers" = 2
check "cputime used perf events (CAP_PERFMON, perf_event_open allowed by the unit's filter)" \
    sh -c "! journalctl -b -u profd -o cat | grep -q 'perf task-clock events unavailable'"
check "STATUS= in systemctl status" sh -c "systemctl show -p StatusText --value profd | grep -q '1 processes sampled'"
# A Python program: its running thread sampled without a stop, its frames read by the eBPF
# program the unit's capabilities (CAP_BPF, CAP_PERFMON) and system call filter (bpf) let
# profd load.
python3 -c 'import time
def spin_py():
    while True:
        sum(range(1000))
spin_py()' &
pyb=$!
check "attach a Python program" profctl attach "$pyb" --hz 199
sleep 3
profctl status "$pyb" --json >/tmp/py.json
profctl slice "$pyb" --last 2 -o /tmp/py.folded --top 0
python3 - /tmp/py.json <<'PY' && ok "Python: the eBPF program loaded under the unit, the running thread sampled without a stop" || bad "Python: the eBPF program loaded under the unit, the running thread sampled without a stop"
import json, sys
st = json.load(open(sys.argv[1]))
t = st["targets"][0]
k = t["python"]["kernel"]
print("python_ebpf", st["daemon"].get("python_ebpf"), "kernel", k, "stopped", t["sampled"]["stopped"])
# (Stopped only while the program loaded, on its own thread: perf.stopped_for_python_loading.)
sys.exit(0 if st["daemon"]["python_ebpf"]["loaded"] and k["frames"] and k["paired"] > 0 and
         t["perf"]["stopped_for_python"] == 0 and
         t["sampled"]["stopped"] <= t["perf"]["stopped_for_python_loading"] else 1)
PY
check "Python: the profile names __main__.spin_py" grep -q '__main__.spin_py' /tmp/py.folded
kill "$pyb"
printf 'hz = 77\n' >/etc/profd/profd.conf
check "systemctl reload succeeds" systemctl reload profd
check "reload: the new configuration in force" sh -c "profctl status --json | grep -Eq '\"default_hz\":[[:space:]]*77'"
printf 'hz = many\n' >/etc/profd/profd.conf
check "a bad configuration: systemctl reload fails" sh -c '! systemctl reload profd'
check "a bad configuration on reload: refused, still active, old settings" \
    sh -c "systemctl is-active -q profd && profctl status --json | grep -Eq '\"default_hz\":[[:space:]]*77'"
check "the refusal is in the journal at error priority" \
    sh -c "journalctl -b -u profd -p err -o cat | grep -q 'reload refused'"
check "info lines at info priority" \
    sh -c "journalctl -b -u profd -p info -o verbose | grep -q 'PRIORITY=6'"
# Export: the backends run on the host (receiver.py: the container shares its network);
# the DSN from a root-only file, the spool in the unit's StateDirectory.
port=$(cat /etc/profd-e2e-port)
printf 'http://0123456789abcdef0123456789abcdef@127.0.0.1:%s/42\n' "$port" >/etc/profd/sentry.dsn
chmod 600 /etc/profd/sentry.dsn
printf 'export_sentry_file = /etc/profd/sentry.dsn\nexport_pyroscope = http://127.0.0.1:%s\nexport_otlp = http://127.0.0.1:%s\nexport_interval = 1\n' "$port" "$port" >/etc/profd/profd.conf
systemctl restart profd.service
check "export: profd restarted under the unit with the exporters" systemctl is-active -q profd.service
check "export: attach (service and label)" profctl attach "$busy" --hz 99 --service e2e --label env=nspawn
sleep 4
profctl status --json >/tmp/st.json
check "export: the unit's profd sent windows to each backend" \
    sh -c "test \$(grep -Ec '\"sent\":[[:space:]]*[1-9]' /tmp/st.json) = 3"
check "export: the spool is the unit's StateDirectory's" \
    sh -c "grep -q '\"spool\":[[:space:]]*\"/var/lib/profd/spool\"' /tmp/st.json && test -d /var/lib/profd/spool"
check "export: the DSN's key is nowhere in status or the journal" \
    sh -c "! grep -q 0123456789abcdef /tmp/st.json && ! journalctl -b -u profd -o cat | grep -q 0123456789abcdef"
printf '\n' >/etc/profd/profd.conf
echo "--- state before the stop"; grep Cap /proc/"$main"/status; profctl status --json | head -c 600; echo; journalctl -b -u profd -o cat; ls -la /etc/profd
systemctl stop profd.service
check "stopped: the program released (not traced, running)" \
    sh -c "grep -q 'TracerPid:[[:space:]]*0' /proc/$busy/status && ! grep -q 'State:[[:space:]]*[tT]' /proc/$busy/status"
check "stopped cleanly (exit 0)" test "$(systemctl show -p ExecMainStatus --value profd.service)" = 0
kill "$busy"
echo "RESULT $fails"
systemctl poweroff
EOF
chmod +x "$root/usr/local/bin/profd-e2e"
cat >"$root/etc/systemd/system/profd-e2e.service" <<'EOF'
[Unit]
Description=profd end-to-end test
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/usr/local/bin/profd-e2e
[Install]
WantedBy=multi-user.target
EOF
ln -sf /etc/systemd/system/profd-e2e.service "$root/etc/systemd/system/multi-user.target.wants/profd-e2e.service"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "$port" >"$root/etc/profd-e2e-port"
rx_out=$(mktemp)
python3 tests/e2e/receiver.py "$port" "$rx_out" &
rx=$!
sleep 1
timeout 600 systemd-nspawn --quiet --boot --register=no --keep-unit --capability=CAP_PERFMON,CAP_CHECKPOINT_RESTORE,CAP_BPF --system-call-filter='perf_event_open bpf' -D "$root" >/dev/null 2>&1 || true
kill "$rx"
wait "$rx" || true
cat "$root/var/log/profd-e2e.log" 2>/dev/null | grep -E '^(ok|FAIL|RESULT)' || true
echo "--- the host's receivers (strict: relay's rules, protoc --decode):"
cat "$rx_out"
grep -q '^RESULT 0$' "$root/var/log/profd-e2e.log" && ! grep -q '^problem' "$rx_out" &&
    grep -Eq '^sentry [1-9]' "$rx_out" && grep -Eq '^pyroscope [1-9]' "$rx_out" &&
    grep -Eq '^otlp [1-9]' "$rx_out"
