#!/usr/bin/env python3
"""Fetch a CPython that Debian 12 does not have, for test_python: Debian unstable's (sid)
python3.14 with the C library and the few libraries it was built against, unpacked under
DEST/python3.14 and made to run here (its interpreter's ELF interpreter and library path
pointed at the unpacked ones with patchelf). The binary is Debian's own, stripped, built by
its GCC: what a user of that distribution runs.

Usage: fetch_python.py [--dest DIR] [--mirror URL]   (DIR: /opt/profd-tests)

Nothing is installed into the system. Exits 0 with DEST/python3.14/usr/bin/python3.14
running, else 1 with why (test_python then says which versions it could check).
"""
import argparse
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request

PACKAGES = ["python3.14-minimal", "libpython3.14-minimal", "libpython3.14-stdlib", "libc6",
            "libexpat1", "zlib1g", "libffi8", "libzstd1", "liblzma5", "libbz2-1.0",
            "libmpdec4", "libcrypt1", "libgcc-s1"]


def fetch(url):
    with urllib.request.urlopen(url, timeout=120) as r:
        return r.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dest", default="/opt/profd-tests")
    ap.add_argument("--mirror", default="http://deb.debian.org/debian")
    a = ap.parse_args()
    root = os.path.join(a.dest, "python3.14")
    exe = os.path.join(root, "usr", "bin", "python3.14")
    if os.access(exe, os.X_OK) and subprocess.run([exe, "-c", "pass"]).returncode == 0:
        print("fetch_python: %s is there" % exe)
        return 0
    if not shutil.which("patchelf") or not shutil.which("dpkg-deb"):
        print("fetch_python: needs patchelf and dpkg-deb", file=sys.stderr)
        return 1
    index = lzma.decompress(fetch(a.mirror + "/dists/sid/main/binary-amd64/Packages.xz"))
    where = {}
    for stanza in index.decode("utf-8", "replace").split("\n\n"):
        fields = dict(l.split(": ", 1) for l in stanza.splitlines() if ": " in l and
                      not l.startswith(" "))
        if fields.get("Package") in PACKAGES and "Filename" in fields:
            where[fields["Package"]] = fields["Filename"]
    missing = [p for p in PACKAGES if p not in where]
    if missing:
        print("fetch_python: not in sid: %s" % missing, file=sys.stderr)
        return 1
    tmp = tempfile.mkdtemp(prefix="profd-py-")
    try:
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        for p in PACKAGES:
            deb = os.path.join(tmp, p + ".deb")
            with open(deb, "wb") as f:
                f.write(fetch(a.mirror + "/" + where[p]))
            subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
        libdir = os.path.join(root, "usr", "lib", "x86_64-linux-gnu")
        subprocess.run(["patchelf", "--set-interpreter",
                        os.path.join(libdir, "ld-linux-x86-64.so.2"),
                        "--set-rpath", libdir, exe], check=True)
        v = subprocess.run([exe, "-c", "import sys, zlib, asyncio; print(sys.version)"],
                           capture_output=True, text=True)
        if v.returncode != 0:
            print("fetch_python: %s does not run: %s" % (exe, v.stderr[-500:]),
                  file=sys.stderr)
            return 1
        print("fetch_python: %s: %s" % (exe, v.stdout.split()[0]))
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
