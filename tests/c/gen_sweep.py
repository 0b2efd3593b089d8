#!/usr/bin/env python3
"""Generates the call table of sweep_api.c from include/surgeguard.h.

For every function the header declares, one `case` that builds hostile arguments by the
parameter's type and name (handles of every kind, NULLs, NaN, infinities, huge numbers,
a `now` above SG_MAX_NOW, foreign and released permits, tickets never issued), calls the
function, and checks the contract with sweep_api.c's helpers. Also, for every config
struct, a mutator that sets random fields (nested ones too) to hostile values, and for
every metrics struct a fingerprint over all its fields. Reading the header means a new
function is swept the day it is added; an argument kind the generator does not know
stops the build.

Usage: gen_sweep.py include/surgeguard.h OUT.inc
"""
import re
import sys

header = open(sys.argv[1]).read()
out = []
emit = out.append

# --- structs --------------------------------------------------------------------------
structs = {}
for name, body in re.findall(r"typedef struct (sg_\w+) \{(.*?)\} \1;", header, re.S):
    fields = []
    for line in body.split("\n"):
        line = line.strip()
        if not line or line.startswith("//"):
            continue
        m = re.match(r"(const char \*|(?:struct )?\w+)\s*(\w+)(?:\[(\w+)\])?;$", line)
        if not m:
            sys.exit(f"gen_sweep: cannot read field of {name}: {line!r}")
        t, f, n = m.groups()
        fields.append((t.replace("struct ", "").strip(), f, n))
    structs[name] = fields

NUMERIC = {"uint64_t": "U64()", "uint32_t": "U32()", "uint16_t": "(uint16_t)U32()",
           "uint8_t": "(uint8_t)U32()", "double": "F64()", "size_t": "(size_t)U64()",
           "bool": "BOOL()"}


def leaves(sname, prefix):
    """(C lvalue, type) of every numeric leaf of struct `sname`, arrays element-wise."""
    for t, f, n in structs[sname]:
        if t in structs:
            yield from leaves(t, f"{prefix}{f}.")
        elif t in NUMERIC:
            if n:
                yield (f"{prefix}{f}[U32() % {n}]", t)
            else:
                yield (f"{prefix}{f}", t)


def fold(sname, prefix):
    """Statements folding every field of `sname` into `h` (pointers skipped)."""
    for t, f, n in structs[sname]:
        if t in structs:
            if n:
                emit(f"    for (size_t i_{f} = 0; i_{f} < {n}; i_{f}++) {{")
                for s in fold_lines(t, f"{prefix}{f}[i_{f}]."):
                    emit("    " + s)
                emit("    }")
            else:
                fold(t, f"{prefix}{f}.")
        elif t in NUMERIC:
            if n:
                emit(f"    for (size_t i = 0; i < {n}; i++) h = mix(h, FOLD_{t}({prefix}{f}[i]));")
            else:
                emit(f"    h = mix(h, FOLD_{t}({prefix}{f}));")


def fold_lines(sname, prefix):
    saved = len(out)
    fold(sname, prefix)
    lines = out[saved:]
    del out[saved:]
    return lines


configs = sorted(s for s in structs if s.endswith("_config"))
for c in configs:
    ls = list(leaves(c, "c->"))
    emit(f"static inline void mutate_{c}({c} *c) {{")
    emit("    unsigned k = U32() % 4; /* 0..3 fields changed */")
    emit("    while (k--) {")
    emit(f"        switch (U32() % {len(ls)}) {{")
    for i, (lv, t) in enumerate(ls):
        emit(f"        case {i}: {lv} = {NUMERIC[t]}; break;")
    emit("        default: break;")
    emit("        }")
    emit("    }")
    emit("}")

metrics = sorted(s for s in structs if s.endswith("_metrics"))
for m in metrics:
    emit(f"static inline uint64_t fold_{m}(const {m} *m) {{")
    emit("    uint64_t h = 0;")
    fold(m, "m->")
    emit("    return h;")
    emit("}")

# --- objects --------------------------------------------------------------------------
protos = re.findall(r"^([A-Za-z_][\w \*]*?)\b(sg_\w+)\(([^;{]*?)\);", header, re.M | re.S)
fns = {}
for ret, name, params in protos:
    ps = []
    for p in " ".join(params.split()).split(","):
        p = p.strip()
        if p in ("void", ""):
            continue
        m = re.match(r"(.*?)(\w+)$", p)
        ps.append((m.group(1).replace("struct ", "").strip(), m.group(2)))
    fns[name] = (ret.strip(), ps)

objects = sorted(n[3:-4] for n in fns if n.endswith("_new"))
emit(f"#define N_TYPES {len(objects)}")
emit("enum {" + ", ".join(f"T_{o.upper()}" for o in objects) + "};")
emit("static const char *const type_names[N_TYPES] = {"
     + ", ".join(f'"{o}"' for o in objects) + "};")

# Fingerprints: the object's metrics (at the sweep's latest in-range `now` if it takes one).
emit("static int fingerprint(int t, const void *h, uint64_t *fp) {")
emit("    switch (t) {")
for o in objects:
    g = fns.get(f"sg_{o}_metrics_get")
    if not g:
        continue
    mtype = g[1][-1][0].replace("*", "").strip()
    args = ", ".join("sweep_now" if n == "now" else ("&m" if n.endswith("_out") else f"(const sg_{o} *)h")
                     for _, n in g[1])
    emit(f"    case T_{o.upper()}: {{")
    emit(f"        {mtype} m;")
    emit(f"        if (sg_{o}_metrics_get({args}) != SG_OK) return 0;")
    emit(f"        *fp = fold_{mtype}(&m);")
    emit("        return 1;")
    emit("    }")
emit("    default: return 0;")
emit("    }")
emit("}")

# Lifecycle helpers per type: a default config, new, init, free, deinit.
for o in objects:
    emit(f"static void *make_heap_{o}(void) {{")
    emit(f"    sg_{o}_config c; sg_{o} *h = NULL;")
    emit(f"    if (sg_{o}_config_default(&c) != SG_OK || sg_{o}_new(&c, &h) != SG_OK) abort();")
    emit("    return h;")
    emit("}")
    emit(f"static void *make_mem_{o}(void) {{")
    emit(f"    sg_{o}_config c; void *mem = NULL;")
    emit(f"    size_t a = sg_{o}_align() < sizeof(void *) ? sizeof(void *) : sg_{o}_align();")
    emit(f"    if (posix_memalign(&mem, a, sg_{o}_size()) != 0) abort();")
    emit(f"    if (sg_{o}_config_default(&c) != SG_OK || sg_{o}_init(mem, sg_{o}_size(), &c) != SG_OK) abort();")
    emit("    return mem;")
    emit("}")
    emit(f"static void end_heap_{o}(void *h) {{ sg_{o}_free((sg_{o} *)h); }}")
    emit(f"static void end_mem_{o}(void *h) {{ if (sg_{o}_deinit((sg_{o} *)h) != SG_OK) abort(); }}")
# The families with a placement: a live object in anonymous shared memory, the same
# handle type (sg_<type>_open_shared), drawn beside the heap and caller-storage ones.
for o in objects:
    if f"sg_{o}_open_shared" not in fns:
        continue
    emit(f"static void *make_shared_{o}(void) {{")
    emit(f"    sg_{o}_config c; sg_{o} *h = NULL;")
    emit(f"    if (sg_{o}_config_default(&c) != SG_OK || sg_{o}_open_shared(NULL, &c, &h) != SG_OK) abort();")
    emit("    return h;")
    emit("}")
emit("static void *(*const make_shared[N_TYPES])(void) = {"
     + ", ".join(f"make_shared_{o}" if f"sg_{o}_open_shared" in fns else "NULL" for o in objects) + "};")
emit("static void *(*const make_heap[N_TYPES])(void) = {" + ", ".join(f"make_heap_{o}" for o in objects) + "};")
emit("static void *(*const make_mem[N_TYPES])(void) = {" + ", ".join(f"make_mem_{o}" for o in objects) + "};")
emit("static void (*const end_heap[N_TYPES])(void *) = {" + ", ".join(f"end_heap_{o}" for o in objects) + "};")
emit("static void (*const end_mem[N_TYPES])(void *) = {" + ", ".join(f"end_mem_{o}" for o in objects) + "};")

# Releases a live permit of `kind` held in `p` to the pool object `h` of the matching type.
emit("static sg_status release_to(int t, void *h, sg_permit *p) {")
emit("    switch (t) {")
for o in objects:
    g = fns.get(f"sg_{o}_release") or fns.get(f"sg_{o}_record")
    if not g or "permit" not in [n for _, n in g[1]]:
        continue
    rel = f"sg_{o}_release" if f"sg_{o}_release" in fns else f"sg_{o}_record"
    args = []
    for ty, n in g[1]:
        if n == o:
            args.append(f"(sg_{o} *)h")
        elif n == "permit":
            args.append("p")
        elif n == "now":
            args.append("sweep_now")
        elif n == "outcome":
            args.append("SG_OUTCOME_IGNORED")
        elif n == "latency_ns":
            args.append("0")
        else:
            sys.exit(f"gen_sweep: release_to: {o} {n}")
    emit(f"    case T_{o.upper()}: return {rel}({', '.join(args)});")
emit("    default: return SG_INVALID_ARGUMENT;")
emit("    }")
emit("}")


# --- the calls ------------------------------------------------------------------------
def type_of_handle(t):
    base = t.replace("const", "").replace("*", "").strip()
    if base.startswith("sg_") and base[3:] in objects:
        return base[3:]
    return None


cases = []
for name in sorted(fns):
    ret, ps = fns[name]
    body = []
    args = []
    outs = []  # (var, kind, name)
    obj = None  # (type, var) of the object the call is on
    permit_outs = []
    skip_free = False
    sgate_obj = None  # the sg_shared_gate the call is on
    sgate_outs = []  # sg_shared_gate_permit outputs
    sgate_ins = []  # sg_shared_gate_permit inputs
    for i, (t, n) in enumerate(ps):
        v = f"a{i}"
        ht = type_of_handle(t)
        base = t.replace("const", "").replace("*", "").strip()
        # The shared gate (Linux): heap handles from sg_shared_gate_open, its own permit
        # storage, tickets recorded from its arrivals (sweep_api.c, "shared gate").
        if base == "sg_shared_gate" and t.endswith("**"):
            body.append(f"sg_shared_gate *o{i} = NULL; sg_shared_gate **{v} = OUTP(&o{i});")
            outs.append((f"o{i}", "handle:shared_gate", n))
            args.append(v)
        elif base == "sg_shared_gate" and name.endswith("_free"):
            body.append(f"sg_shared_gate *{v} = SGATE_FRESH();")
            args.append(v)
        elif base == "sg_shared_gate":
            body.append(f"sg_shared_gate *{v} = SGATE_H();")
            sgate_obj = sgate_obj or v
            args.append(f"({t}){v}")
        elif base == "sg_shared_gate_permit" and n == "permit_out":
            body.append(f"sg_shared_gate_permit *{v} = SGATE_SLOT_FREE();")
            sgate_outs.append(v)
            args.append(v)
        elif base == "sg_shared_gate_permit":
            body.append(f"sg_shared_gate_permit *{v} = SGATE_SLOT_ANY();")
            sgate_ins.append(v)
            args.append(v)
        elif base == "sg_shared_ticket" and "const" in t:
            body.append(f"const sg_shared_ticket *{v} = SGATE_TICKET();")
            args.append(v)
        elif t == "uint64_t" and n == "timeout_ns":
            body.append(f"uint64_t {v} = ONE_IN(2) ? 0 : U64() % 2000000;")
            args.append(v)
        elif t == "const char *" and n == "name":
            body.append(f"const char *{v} = SHARED_NAME();")
            args.append(v)
        elif name.endswith(("_free", "_deinit")) and ht:
            body.append(f"void *{v} = retire_candidate(T_{ht.upper()}, {int(name.endswith('_free'))});")
            skip_free = True
            args.append(f"({t}){v}")
        elif ht and t.endswith("**"):
            body.append(f"sg_{ht} *o{i} = NULL; sg_{ht} **{v} = OUTP(&o{i});")
            outs.append((f"o{i}", "handle:" + ht, n))
            args.append(v)
        elif ht:
            body.append(f"void *{v} = H(T_{ht.upper()});")
            if obj is None:
                obj = (ht, v)
            args.append(f"({t}){v}")
        elif base.endswith("_config") and "const" in t:
            body.append(f"{base} c{i}; {base} *{v} = &c{i};")
            body.append(f"if ({base[:-7]}_config_default(&c{i}) != SG_OK) abort();")
            body.append(f"mutate_{base}(&c{i}); if (ONE_IN(32)) {v} = NULL;")
            args.append(v)
        elif base in structs and t.endswith("*") and "const" not in t and base not in ("sg_permit", "sg_gate_event"):
            body.append(f"{base} o{i}; memset(&o{i}, 0xA5, sizeof o{i}); {base} *{v} = OUTP(&o{i});")
            outs.append((f"o{i}", "struct", n))
            args.append(v)
        elif base == "sg_permit" and n in ("permit_out", "dst"):
            body.append(f"sg_permit *{v} = SLOT_FREE();")
            permit_outs.append(v)
            args.append(v)
        elif base == "sg_permit":
            body.append(f"sg_permit *{v} = SLOT_ANY();")
            args.append(f"({t}){v}")
        elif base == "sg_rejection" and "const" in t:
            body.append(f"sg_rejection r{i}; r{i}.reason = U32(); r{i}.retry_after_ns = U64();")
            body.append(f"const sg_rejection *{v} = ONE_IN(32) ? NULL : &r{i};")
            args.append(v)
        elif base == "sg_actionable" and "const" in t:
            body.append(f"sg_actionable r{i}; r{i}.status = (uint16_t)(ONE_IN(2) ? 429 + 74 * (U32() % 2) : U32());")
            body.append(f"r{i}.retry_after_s = U64(); r{i}.reason = U32();")
            body.append(f"const sg_actionable *{v} = ONE_IN(32) ? NULL : &r{i};")
            args.append(v)
        elif base == "sg_gate_event":
            body.append(f"sg_gate_event ev{i}[8]; memset(ev{i}, 0, sizeof ev{i}); sg_gate_event *{v} = ONE_IN(32) ? NULL : ev{i};")
            args.append(v)
        elif t == "void *" and n == "mem":
            ty = name[3:-5]
            body.append(f"size_t need{i} = sg_{ty}_size(); void *base{i} = NULL;")
            body.append(f"void *{v} = storage_for(need{i}, sg_{ty}_align(), &base{i});")
            args.append(v)
        elif t == "char *" and n == "buf":
            body.append(f"char buf{i}[256]; memset(buf{i}, 0x5A, sizeof buf{i}); char *{v} = ONE_IN(32) ? NULL : buf{i};")
            args.append(v)
        elif t == "const uint8_t *":
            body.append(f"uint8_t bytes{i}[64]; for (size_t k = 0; k < sizeof bytes{i}; k++) bytes{i}[k] = (uint8_t)U32();")
            body.append(f"const uint8_t *{v} = ONE_IN(16) ? NULL : bytes{i};")
            args.append(v)
        elif t == "size_t" and (n in ("len", "cap") or n.endswith("_len")):
            prev = ps[i - 1][1]
            if ps[i - 1][0] == "const uint8_t *" and n == prev + "_len":
                # A byte string and its length: never longer than the 64 bytes behind it.
                body.append(f"size_t {v} = a{i - 1} == NULL ? (ONE_IN(2) ? 0 : 5) : (size_t)(U32() % 65);")
            elif prev == "mem":
                body.append(f"size_t {v} = ONE_IN(8) ? (size_t)U32() % (need{i - 1} + 1) : need{i - 1};")
            elif prev == "buf" and n in ("len", "buf_len"):
                body.append(f"size_t {v} = (size_t)(U32() % 257);")
            elif prev == "bytes":
                body.append(f"size_t {v} = a{i - 1} == NULL ? (ONE_IN(2) ? 0 : 5) : (size_t)(U32() % 65);")
            elif prev.endswith("_out"):
                body.append(f"size_t {v} = a{i - 1} == NULL ? (size_t)(U32() % 2) : (size_t)(U32() % 65);")
            elif prev == "events":
                body.append(f"size_t {v} = a{i - 1} == NULL ? (size_t)(U32() % 2) : (size_t)(U32() % 9);")
            else:
                sys.exit(f"gen_sweep: {name}: size_t {n} after {prev}")
            args.append(v)
        elif t.endswith("*") and base in NUMERIC and i + 1 < len(ps) and ps[i + 1][1] == "cap":
            body.append(f"{base} o{i}[64]; memset(o{i}, 0xA5, sizeof o{i}); {base} *{v} = ONE_IN(16) ? NULL : o{i};")
            outs.append((f"o{i}", "array", n))
            args.append(v)
        elif t.endswith("*") and base in NUMERIC:
            body.append(f"{base} o{i}; memset(&o{i}, 0xA5, sizeof o{i}); {base} *{v} = OUTP(&o{i});")
            outs.append((f"o{i}", "scalar", n))
            args.append(v)
        elif t == "uint64_t" and n == "now":
            body.append(f"uint64_t {v} = NOW();")
            args.append(v)
        elif t == "uint64_t" and n == "ticket":
            body.append(f"uint64_t {v} = TICKET();")
            args.append(v)
        elif t in NUMERIC:
            body.append(f"{t} {v} = {NUMERIC[t]};")
            args.append(v)
        else:
            sys.exit(f"gen_sweep: {name}: no rule for parameter `{t} {n}`")
    call = f"{name}({', '.join(args)})"
    lines = [f"case {len(cases)}: {{ /* {name} */"]
    lines += ["    " + b for b in body]
    if ret == "sg_status":
        if obj:
            lines.append(f"    BEFORE(T_{obj[0].upper()}, {obj[1]});")
        for p in permit_outs:
            lines.append(f"    int live_{p} = permit_state({p});")
        if sgate_obj:
            lines.append(f"    uint64_t sgfp_ = sgate_fp({sgate_obj});")
        for p in sgate_outs:
            lines.append(f"    sg_shared_gate_permit gv_{p}; if ({p}) memcpy(&gv_{p}, {p}, sizeof gv_{p});")
        lines.append(f"    sg_status st = {call};")
        lines.append(f'    check_status(st, "{name}");')
        if sgate_obj:
            lines.append(f'    if ((unsigned)st >= 100) SAME(sgate_fp({sgate_obj}) == sgfp_, "{name}", "a failing call changed the shared gate");')
        for p in sgate_outs:
            lines.append(f'    if (st != SG_OK && {p}) SAME(memcmp(&gv_{p}, {p}, sizeof gv_{p}) == 0, "{name}", "permit output written on failure");')
            lines.append(f"    if (st == SG_OK) sgate_issued({sgate_obj}, {p});")
        for p in sgate_ins:
            lines.append(f"    if (st == SG_OK || st == SG_ALREADY_RELEASED) sgate_released({p});")
        if name == "sg_shared_gate_arrive":
            lines.append("    if (st == SG_QUEUED) sgate_note_ticket(a0, &o5);")
        if obj:
            lines.append(f'    AFTER(T_{obj[0].upper()}, {obj[1]}, st, "{name}");')
        for p in permit_outs:
            lines.append(f'    if (st != SG_OK) SAME(permit_state({p}) == live_{p}, "{name}", "permit output written on failure");')
        for var, kind, n in outs:
            written = "st == SG_OK"
            if n == "ticket_out":
                written = "st == SG_QUEUED"
            elif n == "rejection_out":
                written = "st == SG_REJECTED"
            elif n == "reason_out":
                written = "st == SG_IGNORED"
            if kind.startswith("handle:"):
                lines.append(f'    if (!({written})) SAME({var} == NULL, "{name}", "{n} written on failure");')
                lines.append(f"    if (st == SG_OK && {var} != NULL) sg_{kind[7:]}_free({var});")
            else:
                ref = var if kind == "array" else f"&{var}"
                lines.append(f'    if (!({written})) SAME(canary({ref}, sizeof {var}), "{name}", "{n} written on failure");')
        if name == "sg_gate_arrive":
            lines.append("    if (st == SG_QUEUED) note_ticket(o5);")
        if name == "sg_gate_poll":
            lines.append("    if (st == SG_OK && a2 != NULL) take_events(a0, a2, o4);")
        if name.endswith("_new"):
            pass
        if name.endswith("_init"):
            ty = name[:-5]
            lines.append(f'    if (st == SG_OK) SAME({ty}_deinit(({ty} *)a0) == SG_OK, "{name}", "deinit after init");')
            lines.append("    free(base0);")
    else:
        lines.append(f"    (void){call};")
    if skip_free:
        lines.append("    retire_done(st);" if ret == "sg_status" else "    retire_done(SG_OK);")
    lines.append("    break;")
    lines.append("}")
    cases.append(lines)

# `end_heap_new_` placeholder: free a handle a sweep `_new` made.
text = "\n".join(out)
emit_cases = []
for lines in cases:
    s = "\n".join(lines)
    emit_cases.append(s)
print_out = text + "\n"
print_out += f"#define N_FUNCTIONS {len(cases)}\n"
print_out += "static const char *const function_names[N_FUNCTIONS] = {\n" + ",\n".join(
    f'    "{n}"' for n in sorted(fns)) + "\n};\n"
print_out += "static void call_one(unsigned fn) {\n    switch (fn) {\n" + "\n".join(emit_cases) + "\n    default: break;\n    }\n}\n"
open(sys.argv[2], "w").write(print_out)
