#!/usr/bin/env python3
"""check_sentry.py: reject a Sentry sampled profile (format version "1") that relay or vroom
would reject, or that breaks profd's promises about it.

Usage: check_sentry.py [FILE]   (standard input without FILE)
Exit status 0 when the profile is accepted, 1 with one line per problem when it is not.

Relay's rules are transcribed from getsentry/relay:
  relay-profiling/src/lib.rs             MinimalProfile (event_id|profile_id, platform,
                                         version), MAX_PROFILE_DURATION = 30 s
  relay-profiling/src/sample/v1.rs       ProfileMetadata, ProfilingEvent::valid (cocoa),
                                         parse_profile, SampleProfile::normalize
  relay-profiling/src/sample/mod.rs      Version, Frame, DebugMeta, ThreadMetadata
  relay-profiling/src/transaction_metadata.rs   TransactionMetadata::valid
  relay-profiling/src/debug_image.rs     image types macho|symbolic|sourcemap|proguard|jvm
  relay-profiling/src/native_debug_image.rs     (older relays: code_file, debug_id,
                                         image_addr, image_size required)
  relay-profiling/src/measurements.rs    Measurement
  relay-profiling/src/utils.rs           deserialize_number_from_string
  relay-event-schema/src/protocol/types.rs      Addr (string "0x..." or decimal)
and serde's: a missing required field, a wrong type, a duplicate field of a struct or a
string that is not UTF-8 make the whole item invalid; unknown fields are ignored.
vroom (internal/sample/sample.go) then builds call trees from transaction.active_thread_id.
Problems marked "profd:" are not relay rejections but our own contract (see
daemon/formats/profile_sentry.c): exact id forms, string thread ids, sorted samples, no duplicate or
unreferenced entries, debug_id derived from the build-id, platform "native".
"""

import datetime
import json
import re
import sys

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
MAX_PROFILE_DURATION_NS = 30 * 10**9
IMAGE_TYPES = {"macho", "symbolic", "sourcemap", "proguard", "jvm"}
OLD_IMAGE_TYPES = {"macho", "symbolic"}
FRAME_FIELDS = {"abs_path", "colno", "column", "filename", "file", "function", "name", "in_app",
                "instruction_addr", "lineno", "line", "module", "platform"}
# Platforms for which Sentry re-symbolicates (and trims) frames server-side.
RESYMBOLICATED = {"cocoa", "rust", "javascript", "node"}

HEX = "[0-9a-fA-F]"
UUID_FORMS = [
    re.compile(r"%s{32}" % HEX),
    re.compile(r"{0}{{8}}-{0}{{4}}-{0}{{4}}-{0}{{4}}-{0}{{12}}".format(HEX)),
    re.compile(r"\{{{0}{{8}}-{0}{{4}}-{0}{{4}}-{0}{{4}}-{0}{{12}}\}}".format(HEX)),
    re.compile(r"urn:uuid:{0}{{8}}-{0}{{4}}-{0}{{4}}-{0}{{4}}-{0}{{12}}".format(HEX)),
]
DEBUG_ID_FORMS = [
    re.compile(r"{0}{{8}}-{0}{{4}}-{0}{{4}}-{0}{{4}}-{0}{{12}}(-{0}{{1,8}})?".format(HEX)),
    re.compile(r"%s{32,40}" % HEX),
]
RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|[+-]\d\d:?\d\d)")
STRICT_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")
LOWER_HEX32 = re.compile(r"[0-9a-f]{32}")
ADDR_HEX = re.compile(r"0[xX]\+?([0-9a-fA-F]+)")
DECIMAL = re.compile(r"\+?([0-9]+)")
DIGITS = re.compile(r"[0-9]+")
# A lone surrogate can reach a Python string only through a \uD800-\uDFFF escape (raw
# surrogates are not UTF-8): text without one needs no walk.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class Obj(dict):
    """A JSON object that remembers keys given more than once."""

    def __init__(self, pairs):
        super().__init__()
        self.dups = set()
        for k, v in pairs:
            if k in self:
                self.dups.add(k)
            self[k] = v


def reject_constant(name):
    raise ValueError("%s is not JSON" % name)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


class Checker:
    def __init__(self):
        self.errors = []

    def err(self, path, msg):
        self.errors.append("%s: %s" % (path, msg))

    # -- serde types --------------------------------------------------------------------

    def obj(self, v, path, struct=True):
        """A JSON object; a struct also refuses duplicate fields."""
        if not isinstance(v, dict):
            self.err(path, "relay: expected an object")
            return None
        if struct and getattr(v, "dups", None):
            self.err(path, "relay: duplicate field %s" % ", ".join(sorted(v.dups)))
        return v

    def field(self, o, name, path, required, aliases=()):
        """o[name] (or an alias); None when absent or null. serde refuses a field given
        under two of its names."""
        names = [n for n in (name,) + tuple(aliases) if n in o]
        if len(names) > 1:
            self.err(path, "relay: duplicate field %s" % "/".join(names))
        if not names or o[names[0]] is None:
            if required:
                self.err("%s.%s" % (path, name), "relay: missing field")
            return None
        return o[names[0]]

    def string(self, v, path):
        if not isinstance(v, str):
            self.err(path, "relay: expected a string")
            return False
        return True

    def uint(self, v, path, limit=U64_MAX):
        if not is_int(v) or v < 0 or v > limit:
            self.err(path, "relay: expected an integer in 0..%d" % limit)
            return None
        return v

    def num_or_str(self, v, path):
        """deserialize_number_from_string::<u64>: a number, or a string Rust parses as u64."""
        if is_int(v):
            return self.uint(v, path)
        if isinstance(v, str):
            m = DECIMAL.fullmatch(v)
            if m and int(m.group(1)) <= U64_MAX:
                return int(m.group(1))
            self.err(path, "relay: %r does not parse as u64" % v)
            return None
        self.err(path, "relay: expected a number or a numeric string")
        return None

    def addr(self, v, path):
        """relay_event_schema Addr: a string, "0x" hex or decimal, that fits in u64."""
        if not isinstance(v, str):
            self.err(path, "relay: an address must be a string")
            return None
        m = ADDR_HEX.fullmatch(v)
        value = int(m.group(1), 16) if m else None
        if value is None:
            m = DECIMAL.fullmatch(v)
            value = int(m.group(1)) if m else None
        if value is None or value > U64_MAX:
            self.err(path, "relay: %r is not an address" % v)
            return None
        return value

    def uuid(self, v, path, nonnil=False):
        if not isinstance(v, str) or not any(f.fullmatch(v) for f in UUID_FORMS):
            self.err(path, "relay: %r is not a uuid" % (v,))
            return None
        digits = re.sub(r"[^0-9a-fA-F]", "", v.replace("urn:uuid:", "")).lower()
        if nonnil and int(digits, 16) == 0:
            self.err(path, "relay: nil uuid")
        return digits

    def timestamp(self, v, path):
        m = RFC3339.fullmatch(v) if isinstance(v, str) else None
        try:
            if not m:
                raise ValueError
            y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
            datetime.datetime(y, mo, d, h, mi, s)
        except ValueError:
            self.err(path, "relay: %r is not an RFC 3339 date-time" % (v,))

    # -- the profile --------------------------------------------------------------------

    def load(self, data):
        """The JSON object in data as serde_json would read it, or None."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.err("$", "relay: not UTF-8 (%s)" % e)
            return None
        try:
            root = json.loads(text, object_pairs_hook=Obj, parse_constant=reject_constant)
        except ValueError as e:
            self.err("$", "relay: invalid JSON (%s)" % e)
            return None
        if SURROGATE_ESCAPE.search(text):
            self.no_lone_surrogates(root, "$")
        return self.obj(root, "$")

    def check(self, data):
        root = self.load(data)
        if root is None:
            return

        # lib.rs MinimalProfile, then sample::v1::ProfilingEvent.
        event_id = self.field(root, "event_id", "$", True, aliases=("profile_id",))
        if event_id is not None:
            self.uuid(event_id, "$.event_id")
            if not (isinstance(event_id, str) and LOWER_HEX32.fullmatch(event_id)):
                self.err("$.event_id", "profd: must be 32 lowercase hex digits")
        version = self.field(root, "version", "$", True)
        if version is not None and version != "1":
            self.err("$.version", "relay: %r is not the sample format version \"1\"" % (version,))
        platform = self.field(root, "platform", "$", True)
        if platform is not None and self.string(platform, "$.platform"):
            if platform in RESYMBOLICATED:
                self.err("$.platform", "profd: %r makes Sentry re-symbolicate and trim our "
                         "frames; native code is \"native\"" % platform)
        ts = self.field(root, "timestamp", "$", True)
        if ts is not None:
            self.timestamp(ts, "$.timestamp")
            if not (isinstance(ts, str) and STRICT_TIMESTAMP.fullmatch(ts)):
                self.err("$.timestamp", "profd: expected YYYY-MM-DDTHH:MM:SS.ffffffZ")
        for name in ("environment", "dist"):
            v = self.field(root, name, "$", False)
            if v is not None:
                self.string(v, "$." + name)
        release = self.field(root, "release", "$", False)
        if release is not None:
            self.string(release, "$.release")

        os_ = self.obj(self.field(root, "os", "$", True) or {}, "$.os")
        device = self.obj(self.field(root, "device", "$", True) or {}, "$.device")
        if "os" in root and os_ is not None:
            for name in ("name", "version"):
                v = self.field(os_, name, "$.os", True)
                if v is not None:
                    self.string(v, "$.os." + name)
            if self.field(os_, "build_number", "$.os", False) is not None:
                self.string(os_["build_number"], "$.os.build_number")
            if os_.get("name") != "Linux":
                self.err("$.os.name", "profd: expected \"Linux\"")
        if "device" in root and device is not None:
            arch = self.field(device, "architecture", "$.device", True)
            if arch is not None:
                self.string(arch, "$.device.architecture")
            if self.field(device, "is_emulator", "$.device", False) is not None and \
                    not isinstance(device["is_emulator"], bool):
                self.err("$.device.is_emulator", "relay: expected a boolean")
            for name in ("locale", "manufacturer", "model"):
                v = self.field(device, name, "$.device", False)
                if v is not None:
                    self.string(v, "$.device." + name)
        runtime = self.field(root, "runtime", "$", False)
        if runtime is not None and self.obj(runtime, "$.runtime") is not None:
            for name in ("name", "version"):
                v = self.field(runtime, name, "$.runtime", True)
                if v is not None:
                    self.string(v, "$.runtime." + name)
        if platform == "cocoa":
            # ProfilingEvent::valid: MissingProfileMetadata otherwise.
            if not (isinstance(os_, dict) and os_.get("build_number") is not None and
                    isinstance(device, dict) and all(device.get(k) is not None for k in
                                                     ("is_emulator", "locale", "manufacturer",
                                                      "model"))):
                self.err("$", "relay: cocoa needs os.build_number and device.is_emulator, "
                         "locale, manufacturer, model (MissingProfileMetadata)")

        self.measurements(root)
        self.debug_meta(root)
        txn = self.transaction(root)
        trace = self.field(root, "profile", "$", True)
        if trace is None:
            return
        self.trace(trace, txn)

    def no_lone_surrogates(self, v, path):
        """serde_json refuses a \\uD800-style escape without its pair; Python keeps it."""
        if isinstance(v, str):
            if re.search("[\ud800-\udfff]", v):
                self.err(path, "relay: lone surrogate in a string")
        elif isinstance(v, dict):
            for k, x in v.items():
                self.no_lone_surrogates(k, path)
                self.no_lone_surrogates(x, "%s.%s" % (path, k))
        elif isinstance(v, list):
            for i, x in enumerate(v):
                self.no_lone_surrogates(x, "%s[%d]" % (path, i))

    def measurements(self, root):
        m = self.field(root, "measurements", "$", False)
        if m is None or self.obj(m, "$.measurements", struct=False) is None:
            return
        for key, meas in m.items():
            path = "$.measurements.%s" % key
            if self.obj(meas, path) is None:
                continue
            unit = self.field(meas, "unit", path, True)
            if unit is not None:
                self.string(unit, path + ".unit")
            values = self.field(meas, "values", path, True)
            if values is None:
                continue
            if not isinstance(values, list):
                self.err(path + ".values", "relay: expected an array")
                continue
            for i, v in enumerate(values):
                vp = "%s.values[%d]" % (path, i)
                if self.obj(v, vp) is None:
                    continue
                e = self.field(v, "elapsed_since_start_ns", vp, True)
                if e is not None:
                    self.num_or_str(e, vp + ".elapsed_since_start_ns")
                x = self.field(v, "value", vp, True)
                if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float))):
                    self.err(vp + ".value", "relay: expected a number")

    def debug_meta(self, root):
        dm = self.field(root, "debug_meta", "$", False)
        if dm is None or self.obj(dm, "$.debug_meta") is None:
            return
        images = self.field(dm, "images", "$.debug_meta", True)
        if images is None:
            return
        if not isinstance(images, list):
            self.err("$.debug_meta.images", "relay: expected an array")
            return
        for i, im in enumerate(images):
            path = "$.debug_meta.images[%d]" % i
            if self.obj(im, path) is None:
                continue
            typ = self.field(im, "type", path, True)
            if typ is not None and typ not in IMAGE_TYPES:
                self.err(path + ".type", "relay: unknown image type %r" % (typ,))
            elif typ is not None and typ not in OLD_IMAGE_TYPES:
                self.err(path + ".type", "relay (older versions): only macho and symbolic")
            if typ is not None and typ != "symbolic":
                self.err(path + ".type", "profd: ELF images are \"symbolic\"")
            native = typ in OLD_IMAGE_TYPES
            code_file = self.field(im, "code_file", path, native, aliases=("name",))
            if code_file is not None:
                self.string(code_file, path + ".code_file")
            debug_id = self.field(im, "debug_id", path, native, aliases=("id",))
            if debug_id is not None and not (isinstance(debug_id, str) and
                                             any(f.fullmatch(debug_id) for f in DEBUG_ID_FORMS)):
                self.err(path + ".debug_id", "relay: %r is not a debug id" % (debug_id,))
                debug_id = None
            image_addr = self.field(im, "image_addr", path, native)
            if image_addr is not None:
                self.addr(image_addr, path + ".image_addr")
                if not (isinstance(image_addr, str) and re.fullmatch("0x[0-9a-f]+", image_addr)):
                    self.err(path + ".image_addr", "profd: expected 0x and lowercase hex")
            if self.field(im, "image_vmaddr", path, False) is not None:
                self.addr(im["image_vmaddr"], path + ".image_vmaddr")
            size = self.field(im, "image_size", path, native)
            if size is not None:
                size = self.num_or_str(size, path + ".image_size")
                if size == 0:
                    self.err(path + ".image_size", "profd: empty image")
            if self.field(im, "uuid", path, False, aliases=("build_id",)) is not None:
                self.uuid(im.get("uuid", im.get("build_id")), path + ".uuid")
            code_id = im.get("code_id")
            if typ == "symbolic":
                if not (isinstance(code_id, str) and re.fullmatch("([0-9a-f]{2})+", code_id)):
                    self.err(path + ".code_id", "profd: expected the build-id in lowercase hex")
                elif debug_id is not None and debug_id.lower() != debug_id_from_build_id(
                        bytes.fromhex(code_id)):
                    self.err(path + ".debug_id", "profd: %s is not the debug id of build-id %s "
                             "(expected %s)" % (debug_id, code_id,
                                                debug_id_from_build_id(bytes.fromhex(code_id))))

    def transaction(self, root):
        """The transaction (or transactions[0]) relay keeps, or None."""
        txn = self.field(root, "transaction", "$", False)
        path = "$.transaction"
        if txn is None:
            txns = self.field(root, "transactions", "$", False)
            if isinstance(txns, list) and txns:
                txn, path = txns[0], "$.transactions[0]"
        if txn is None:
            self.err("$", "relay: no transaction (NoTransactionAssociated)")
            return None
        if self.obj(txn, path) is None:
            return None
        out = {"start": 0, "end": 0, "active": 0}
        for name in ("id", "trace_id"):
            v = self.field(txn, name, path, True)
            if v is not None:
                self.uuid(v, "%s.%s" % (path, name), nonnil=True)
                if not (isinstance(v, str) and LOWER_HEX32.fullmatch(v)):
                    self.err("%s.%s" % (path, name), "profd: must be 32 lowercase hex digits")
        name = self.field(txn, "name", path, True)
        if name is not None and self.string(name, path + ".name") and not name:
            self.err(path + ".name", "relay: empty name (InvalidTransactionMetadata)")
        for key, field in (("active", "active_thread_id"), ("start", "relative_start_ns"),
                           ("end", "relative_end_ns"), (None, "relative_cpu_start_ms"),
                           (None, "relative_cpu_end_ms")):
            v = self.field(txn, field, path, False)
            if v is not None:
                v = self.num_or_str(v, "%s.%s" % (path, field))
                if key and v is not None:
                    out[key] = v
        if not out["start"] < out["end"]:
            self.err(path, "relay (older versions): relative_start_ns must be below "
                     "relative_end_ns (InvalidTransactionMetadata)")
        return out

    def trace(self, trace, txn):
        path = "$.profile"
        if self.obj(trace, path) is None:
            return
        arrays = self.arrays(trace, path)
        if arrays is None:
            return
        samples, stacks, frames = arrays

        parsed = []  # (stack_id, thread_id, elapsed)
        for i, s in enumerate(samples):
            # The usual sample, which the checks below would pass as it is.
            if type(s) is Obj and not s.dups and s.get("queue_address") is None:
                sid, tid, el = s.get("stack_id"), s.get("thread_id"), \
                    s.get("elapsed_since_start_ns")
                if type(sid) is int and 0 <= sid <= U64_MAX and type(tid) is str and \
                        type(el) is str and DIGITS.fullmatch(tid) and DIGITS.fullmatch(el):
                    tid, el = int(tid), int(el)
                    if tid <= U64_MAX and el <= U64_MAX:
                        parsed.append((sid, tid, el))
                        continue
            sp = "%s.samples[%d]" % (path, i)
            if self.obj(s, sp) is None:
                continue
            stack_id = self.field(s, "stack_id", sp, True)
            if stack_id is not None:
                stack_id = self.uint(stack_id, sp + ".stack_id")
            tid = self.field(s, "thread_id", sp, True)
            elapsed = self.field(s, "elapsed_since_start_ns", sp, True)
            for name, v in (("thread_id", tid), ("elapsed_since_start_ns", elapsed)):
                if v is not None and not (isinstance(v, str) and re.fullmatch("[0-9]+", v)):
                    self.err("%s.%s" % (sp, name), "profd: must be a string of decimal digits")
            tid = self.num_or_str(tid, sp + ".thread_id") if tid is not None else None
            elapsed = self.num_or_str(elapsed, sp + ".elapsed_since_start_ns") \
                if elapsed is not None else None
            if self.field(s, "queue_address", sp, False) is not None:
                self.string(s["queue_address"], sp + ".queue_address")
            if None not in (stack_id, tid, elapsed):
                parsed.append((stack_id, tid, elapsed))

        self.stacks_frames(stacks, frames, path)

        tm = self.field(trace, "thread_metadata", path, False)
        sampled_tids = {t for _, t, _ in parsed}
        if tm is not None and self.obj(tm, path + ".thread_metadata", struct=False) is not None:
            for key, meta in tm.items():
                mp = "%s.thread_metadata.%s" % (path, key)
                if self.obj(meta, mp) is None:
                    continue
                if self.field(meta, "name", mp, False) is not None:
                    self.string(meta["name"], mp + ".name")
                if self.field(meta, "priority", mp, False) is not None:
                    self.uint(meta["priority"], mp + ".priority", U32_MAX)
                if not re.fullmatch("[0-9]+", key):
                    self.err(mp, "profd: thread_metadata keys are thread ids")
                elif int(key) not in sampled_tids:
                    self.err(mp, "profd: a thread without samples")
        if self.errors:
            return  # relay stops at the first type error; the rest would be noise

        self.contract(parsed, stacks, frames, txn)
        self.relay_normalize(parsed, stacks, frames, txn)

    def arrays(self, trace, path):
        """The profile's samples, stacks and frames, each an array, or None."""
        out = [self.field(trace, name, path, True) for name in ("samples", "stacks", "frames")]
        for name, v in zip(("samples", "stacks", "frames"), out):
            if v is not None and not isinstance(v, list):
                self.err("%s.%s" % (path, name), "relay: expected an array")
                return None
        return None if None in out else out

    def stacks_frames(self, stacks, frames, path):
        for i, st in enumerate(stacks):
            if not isinstance(st, list):
                self.err("%s.stacks[%d]" % (path, i), "relay: expected an array")
                continue
            for j, f in enumerate(st):
                self.uint(f, "%s.stacks[%d][%d]" % (path, i, j))
        for i, f in enumerate(frames):
            self.frame(f, "%s.frames[%d]" % (path, i))

    def frame(self, f, path):
        if self.obj(f, path) is None:
            return
        for name, aliases in (("abs_path", ()), ("filename", ("file",)),
                              ("function", ("name",)), ("module", ()), ("platform", ())):
            v = self.field(f, name, path, False, aliases)
            if v is not None:
                self.string(v, "%s.%s" % (path, name))
        for name, aliases in (("colno", ("column",)), ("lineno", ("line",))):
            v = self.field(f, name, path, False, aliases)
            if v is not None:
                self.uint(v, "%s.%s" % (path, name), U32_MAX)
        in_app = self.field(f, "in_app", path, False)
        if in_app is not None and not isinstance(in_app, bool):
            self.err(path + ".in_app", "relay: expected a boolean")
        addr = self.field(f, "instruction_addr", path, False)
        if addr is not None:
            self.addr(addr, path + ".instruction_addr")
        # profd's frames: native ones with their address; Python ones as Sentry's Python SDK
        # writes them (function, abs_path, filename, lineno, module if known), no address.
        if addr is None:
            if not (isinstance(f.get("function"), str) and isinstance(f.get("abs_path"), str)
                    and isinstance(f.get("filename"), str)):
                self.err(path, "profd: a frame without instruction_addr is a Python frame: "
                         "function, abs_path and filename")
        elif not (isinstance(addr, str) and re.fullmatch("0x[0-9a-f]+", addr)):
            self.err(path + ".instruction_addr", "profd: expected 0x and lowercase hex")
        if not isinstance(in_app, bool):
            self.err(path + ".in_app", "profd: every frame says whether it is in the app")
        if isinstance(f.get("lineno"), int) and f["lineno"] == 0:
            self.err(path + ".lineno", "profd: an unknown line is left out, not 0")
        dropped = sorted(set(f) - FRAME_FIELDS)
        if dropped:
            self.err(path, "profd: relay drops field(s) %s" % ", ".join(dropped))

    def contract(self, samples, stacks, frames, txn):
        """profd's promises, beyond what relay checks."""
        times = [e for _, _, e in samples]
        if times != sorted(times):
            self.err("$.profile.samples", "profd: samples are not sorted by time "
                     "(relay checks only the last against its 30 s limit)")
        if txn and txn["end"] > 0:
            outside = [e for e in times if not txn["start"] <= e <= txn["end"]]
            if outside:
                self.err("$.profile.samples", "profd: %d samples outside the transaction, "
                         "which relay drops" % len(outside))
        used_stacks = {s for s, _, _ in samples}
        if len(used_stacks) != len(stacks) or any(s >= len(stacks) for s in used_stacks):
            self.err("$.profile.stacks", "profd: stacks no sample uses, or samples that use "
                     "no stack")
        keys = [tuple(st) for st in stacks]
        if len(set(keys)) != len(keys):
            self.err("$.profile.stacks", "profd: duplicate stacks")
        used_frames = {f for st in stacks for f in st}
        if len(used_frames) != len(frames) or any(f >= len(frames) for f in used_frames):
            self.err("$.profile.frames", "profd: frames no stack uses, or stacks that use "
                     "no frame")
        fkeys = [json.dumps(f, sort_keys=True) for f in frames]
        if len(set(fkeys)) != len(fkeys):
            self.err("$.profile.frames", "profd: duplicate frames")

    def relay_normalize(self, samples, stacks, frames, txn):
        """parse_profile and SampleProfile::normalize, in relay's order."""
        if txn is None:
            return
        if txn["end"] > 0:
            samples = [s for s in samples if txn["start"] <= s[2] <= txn["end"]]

        # remove_idle_samples_at_the_edge: per thread, keep from its first sample with a
        # non-empty (existing) stack to its last one, by position in the array.
        ranges = {}
        for i, (st, tid, _) in enumerate(samples):
            if st < len(stacks) and stacks[st]:
                first, _ = ranges.get(tid, (i, i))
                ranges[tid] = (first, i)
        samples = [s for i, s in enumerate(samples)
                   if s[1] in ranges and ranges[s[1]][0] <= i <= ranges[s[1]][1]]
        # remove_single_samples_per_thread
        counts = {}
        for _, tid, _ in samples:
            counts[tid] = counts.get(tid, 0) + 1
        samples = [s for s in samples if counts[s[1]] > 1]

        if not samples:
            self.err("$.profile", "relay: no samples left after normalization "
                     "(NotEnoughSamples)")
            return
        if any(st >= len(stacks) for st, _, _ in samples):
            self.err("$.profile.samples", "relay: stack_id out of range (MalformedSamples)")
            return
        if any(f >= len(frames) for st in stacks for f in st):
            self.err("$.profile.stacks", "relay: frame index out of range (MalformedStacks)")
            return
        if samples[-1][2] > MAX_PROFILE_DURATION_NS:
            self.err("$.profile.samples", "relay: last sample more than 30 s after the start "
                     "(DurationIsTooLong)")
            return
        # vroom's CallTrees uses only the active thread, and not its last sample.
        active = [s for s in samples if s[1] == txn["active"]]
        if len(active) < 2:
            self.err("$.transaction.active_thread_id", "profd: thread %d has %d samples after "
                     "relay's normalization; vroom builds call trees from it alone"
                     % (txn["active"], len(active)))
        self.kept = (len(samples), len({t for _, t, _ in samples}))


def debug_id_from_build_id(build_id):
    """sentry-rust's debug_id_from_build_id: 16 bytes (zero-padded), the first three uuid
    fields byte-swapped (ELF on little-endian machines)."""
    b = (build_id[:16] + bytes(16))[:16]
    b = b[3::-1] + b[5:3:-1] + b[7:5:-1] + b[8:]
    h = b.hex()
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


class ChunkChecker(Checker):
    """A profile chunk, version "2" (continuous profiling), as relay reads it
    (relay-profiling/src/sample/v2.rs: ProfileChunk with its flattened ProfileMetadata, then
    ProfileData::normalize), with the frame and debug_meta rules of version 1 and profd's
    own promises."""

    def check(self, data):
        root = self.load(data)
        if root is None:
            return
        for name in ("chunk_id", "profiler_id"):
            v = self.field(root, name, "$", True)
            if v is not None:
                self.uuid(v, "$." + name, nonnil=True)
        version = self.field(root, "version", "$", True)
        if version is not None and version != "2":
            self.err("$.version", "relay: %r is not the chunk format version \"2\"" % (version,))
        for name, required in (("platform", True), ("release", True), ("environment", False)):
            v = self.field(root, name, "$", required)
            if v is not None:
                self.string(v, "$." + name)
        sdk = self.field(root, "client_sdk", "$", True)
        if sdk is not None and self.obj(sdk, "$.client_sdk") is not None:
            for name in ("name", "version"):
                v = self.field(sdk, name, "$.client_sdk", True)
                if v is not None:
                    self.string(v, "$.client_sdk." + name)
        self.debug_meta(root)
        trace = self.field(root, "profile", "$", True)
        if trace is None or self.obj(trace, "$.profile") is None:
            return
        path = "$.profile"
        arrays = self.arrays(trace, path)
        if arrays is None:
            return
        samples, stacks, frames = arrays
        parsed = []  # (timestamp, stack_id, thread_id)
        for i, x in enumerate(samples):
            sp = "%s.samples[%d]" % (path, i)
            if self.obj(x, sp) is None:
                continue
            ts = self.field(x, "timestamp", sp, True)
            if ts is not None and (isinstance(ts, bool) or not isinstance(ts, (int, float))):
                self.err(sp + ".timestamp", "relay: expected a number (unix seconds)")
                ts = None
            st = self.field(x, "stack_id", sp, True)
            st = self.uint(st, sp + ".stack_id") if st is not None else None
            tid = self.field(x, "thread_id", sp, True)
            if tid is not None and self.string(tid, sp + ".thread_id"):
                if not re.fullmatch("[0-9]+", tid):
                    self.err(sp + ".thread_id", "profd: a thread id in decimal digits")
            if None not in (ts, st, tid):
                parsed.append((ts, st, tid))
        self.stacks_frames(stacks, frames, path)
        tm = self.field(trace, "thread_metadata", path, False)
        sampled_tids = {t for _, t, _ in parsed}
        if tm is not None and self.obj(tm, path + ".thread_metadata", struct=False) is not None:
            for key, meta in tm.items():
                mp = "%s.thread_metadata.%s" % (path, key)
                if self.obj(meta, mp) is not None and \
                        self.field(meta, "name", mp, False) is not None:
                    self.string(meta["name"], mp + ".name")
                if all(t != key for _, _, t in parsed):
                    self.err(mp, "profd: a thread without samples")
        if self.errors:
            return
        # ProfileData::normalize
        if not parsed:
            self.err("$.profile.samples", "relay: no samples (NotEnoughSamples)")
            return
        if any(st >= len(stacks) for _, st, _ in parsed):
            self.err("$.profile.samples", "relay: stack_id out of range (MalformedSamples)")
        if any(f >= len(frames) for st in stacks for f in st):
            self.err("$.profile.stacks", "relay: frame index out of range (MalformedStacks)")
        times = [t for t, _, _ in parsed]
        if times != sorted(times):
            self.err("$.profile.samples", "profd: samples are not sorted by time")
        if times[-1] - times[0] > MAX_CHUNK_SECONDS:
            self.err("$.profile.samples", "relay: a chunk spans at most %d s" % MAX_CHUNK_SECONDS)
        if len({st for _, st, _ in parsed}) != len(stacks):
            self.err("$.profile.stacks", "profd: stacks no sample uses")
        if len({f for st in stacks for f in st}) != len(frames):
            self.err("$.profile.frames", "profd: frames no stack uses")
        self.kept = (len(parsed), len({t for _, _, t in parsed}))


MAX_CHUNK_SECONDS = 66


def check_chunk(data):
    """Return (problems, checker) for the profile chunk `data` (bytes)."""
    c = ChunkChecker()
    c.check(data)
    return c.errors, c


def check(data):
    """Return (problems, checker) for the profile `data` (bytes)."""
    c = Checker()
    c.check(data)
    return c.errors, c


def main(argv):
    if len(argv) > 1:
        with open(argv[1], "rb") as f:
            data = f.read()
    else:
        data = sys.stdin.buffer.read()
    errors, c = check(data)
    for e in errors:
        print("check_sentry: " + e, file=sys.stderr)
    if errors:
        return 1
    kept = getattr(c, "kept", (0, 0))
    print("check_sentry: ok (relay keeps %d samples in %d threads)" % kept)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
