#!/usr/bin/env python3
"""Reference of TransformerEngine's delayed-scaling update, written for fp8train (torch only).

It implements the rules of TE's default fused update kernel (`kernel_bulk` in
transformer_engine/common/recipe/delayed_scaling.cu, TE >= 1.7) and of its cast kernels, in
float32 torch arithmetic, without importing TE:

  cast amax   max |x| with fmaxf: NaN elements are ignored, inf counts; every cast of a slot
              max-accumulates into row 0 of its history;
  skip        a slot whose row 0 is 0 neither rolls nor changes its scale;
  roll        h <- roll(h, -1); h[0] <- 0;
  amax        max: fmaxf over the window (h[1:] and the current amax, NaN ignored);
              most_recent: the current amax;
  scale       (fp8_max * 2^-margin) / amax in ONE float32 division; the old scale when amax is
              0 or not finite; FLT_MAX when the quotient is inf; scale_inv = 1 / scale.

It replays scripted cast inputs (zeros, NaN elements, inf, tiny and huge values) over several
micro-batches per step, in both of fp8train's fp8.amax_update modes:
  step        one update per optimizer step (row 0 = max over the step's micro-batches);
  microbatch  one update after every micro-batch, TE's behaviour; the weight is cast only in
              the first micro-batch of a step (TE's is_first_microbatch), so its slot sees no
              amax in micro-batches 2..M.

Usage:
  te_delayed_scaling_reference.py OUT.json     write the expected states
  te_delayed_scaling_reference.py --check GOLDEN.json
                                               exit 1 unless regenerating gives GOLDEN exactly
The golden file is tests/fp8/recipes/data/te_delayed_scaling.json; tests/fp8/recipes/test_te_parity.cpp
replays it through fp8train's DelayedScaling bit for bit.
"""
import json
import math
import re
import struct
import sys

import torch

F32 = torch.float32
FLT_MAX = struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0]
FP8_MAX = {"E4M3": 448.0, "E5M2": 57344.0}
NAN = float("nan")
INF = float("inf")

# Slots of one converted Linear: name, format, recorded in which micro-batches.
SLOTS = [("input", "E4M3", "every"), ("weight", "E4M3", "first"), ("grad_output", "E5M2", "every")]


def bits(x):
    """float32 bit pattern of x as '0x........' (exact, NaN and -0 included)."""
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", float(x)))[0]


def f32(x):
    return float(torch.tensor(x, dtype=F32))


# ---- TE's rules -------------------------------------------------------------------------------


def cast_amax(values):
    """The amax a cast records: fmaxf over |x| starting at 0 (NaN elements ignored)."""
    amax = torch.zeros((), dtype=F32)
    for v in torch.tensor(values, dtype=F32).abs():
        amax = torch.fmax(amax, v)
    return amax


def update(history, scale, fp8_max, margin, algo):
    """One fused update of every slot, in place. history [L, S], scale [S], float32."""
    length, slots = history.shape
    for j in range(slots):
        last = history[0, j].clone()
        if last == 0:
            continue
        window = torch.cat([history[1:, j], last.reshape(1)])  # the rolled history before h[0] = 0
        amax = torch.zeros((), dtype=F32)
        for a in window:
            amax = torch.fmax(amax, a)
        if algo == "most_recent":
            amax = last
        history[:, j] = window
        history[0, j] = 0.0
        scaled_max = torch.tensor(fp8_max[j], dtype=F32) * torch.tensor(2.0 ** -margin, dtype=F32)
        s = scaled_max / amax if bool(torch.isfinite(amax)) and amax > 0 else scale[j].clone()
        if bool(torch.isinf(s)):
            s = torch.tensor(FLT_MAX, dtype=F32)
        scale[j] = s


def state(history, scale, step, micro):
    scale_inv = torch.ones((), dtype=F32) / scale
    return {
        "after": [step, micro],
        "scale": [bits(v) for v in scale],
        "scale_inv": [bits(v) for v in scale_inv],
        "history": [[bits(v) for v in row] for row in history],
    }


def replay(scenario, mode):
    """Expected states after every update of `scenario` under fp8.amax_update = mode."""
    length, n_slots = scenario["amax_history_len"], len(SLOTS)
    history = torch.zeros(length, n_slots, dtype=F32)
    scale = torch.ones(n_slots, dtype=F32)
    fp8_max = [FP8_MAX[fmt] for _, fmt, _ in SLOTS]
    margin, algo = scenario["margin"], scenario["amax_compute_algo"]
    out = []
    for s, step in enumerate(scenario["casts"]):
        for k, micro in enumerate(step):
            for j, (name, _, _) in enumerate(SLOTS):
                if name in micro:
                    values = [struct.unpack("<f", struct.pack("<I", int(b, 16)))[0] for b in micro[name]]
                    history[0, j] = torch.fmax(history[0, j], cast_amax(values))
            if mode == "microbatch" or k + 1 == len(step):
                update(history, scale, fp8_max, margin, algo)
                out.append(state(history, scale, s, k))
    return out


# ---- scripted inputs ----------------------------------------------------------------------------


def tensor_for(kind, a):
    """Eight float32 values of one cast: max |x| = a, plus the special elements `kind` asks for."""
    base = [a, -a / 2, a / 4, -a / 8, a / 16, -a / 32, a / 64, 0.0]
    if kind == "zeros":
        base = [0.0] * 8
    elif kind == "nan_elem":
        base[3] = NAN
    elif kind == "all_nan":
        base = [NAN] * 8
    elif kind == "inf":
        base[5] = -INF
    elif kind == "neg_zero":
        base = [-0.0] * 8
    return [bits(f32(v)) for v in base]


def scripted(plan, micro_batches):
    """plan: one (kind, amax) per (step, micro, slot) as a nested list; the weight only in micro 0."""
    casts = []
    for step in plan:
        assert len(step) == micro_batches
        micros = []
        for k, row in enumerate(step):
            entry = {}
            for j, (name, _, when) in enumerate(SLOTS):
                if when == "first" and k > 0:
                    continue
                kind, a = row[j]
                entry[name] = tensor_for(kind, a)
            micros.append(entry)
        casts.append(micros)
    return casts


def lcg_plan(seed, steps, micro_batches):
    """Pseudo-random magnitudes 2^[-30, 30] with zero tensors, NaN elements and infs (pure Python
    integer arithmetic, so the plan is the same on every machine)."""
    state = seed
    kinds = ["plain"] * 6 + ["zeros", "nan_elem", "all_nan", "inf"]
    plan = []
    for _ in range(steps):
        step = []
        for _ in range(micro_batches):
            row = []
            for _ in SLOTS:
                state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
                kind = kinds[(state >> 33) % len(kinds)]
                exponent = (state >> 20) % 61 - 30
                mantissa = 1.0 + ((state >> 8) % 4096) / 4096.0
                row.append((kind, math.ldexp(mantissa, exponent)))
            step.append(row)
        plan.append(step)
    return plan


W = None  # the weight's column in micro-batches 2..M: never cast, never read


def edge_plan():
    """Hand-written: each row is one micro-batch, columns input / weight / grad_output."""
    def p(a):
        return ("plain", a)

    zeros, all_nan = ("zeros", 0.0), ("all_nan", 0.0)
    return [
        [[p(1.0), p(0.5), p(3.0)], [p(2.0), W, p(1e-3)], [p(0.25), W, p(7.0)]],
        # zeros everywhere in micro 0, NaN elements and an all-NaN tensor after
        [[zeros, zeros, zeros], [("nan_elem", 4.0), W, all_nan], [zeros, W, ("nan_elem", 9.0)]],
        # inf, a subnormal amax (the scale overflows to FLT_MAX), -0 only, 2^-120
        [[("inf", 1.0), p(1e-42), ("neg_zero", 0.0)], [p(3.0), W, p(2.0 ** -120)], [p(1.0), W, p(5.0)]],
        # huge values: scales far below 1 (subnormal with margin 17)
        [[p(3.0e38), p(7.926375814311875e37), p(1e30)], [p(448.0), W, p(57344.0)], [p(1.0), W, p(1.0)]],
        [[p(2.0), p(2.0), p(2.0)], [all_nan, W, zeros], [zeros, W, zeros]],
        [[p(0.125), p(1.5), p(6.0)], [p(0.5), W, p(0.75)], [p(1.0), W, p(1.0)]],
    ]


def single_plan():
    """One micro-batch per step; amaxes where the fused order's single rounding matters."""
    plan = []
    for a in [2.0 ** -120, 7.926375814311875e37, 1.5036489096486228e38, 1e-42, 3.0, 0.0, 2.0 ** 100, 1e-30]:
        first = ("zeros", 0.0) if a == 0 else ("plain", a)
        plan.append([[first, ("plain", a / 3), ("plain", a * 5)]])  # a * 5 may be inf in float32
    return plan


def scenarios():
    edge, single = scripted(edge_plan(), 3), scripted(single_plan(), 1)
    return [
        dict(name="edge_max_L4", amax_history_len=4, amax_compute_algo="max", margin=0, casts=edge),
        dict(name="edge_most_recent_L3_margin2", amax_history_len=3, amax_compute_algo="most_recent",
             margin=2, casts=edge),
        dict(name="edge_max_L1_margin-3", amax_history_len=1, amax_compute_algo="max", margin=-3,
             casts=edge),
        dict(name="fused_order_margin17", amax_history_len=2, amax_compute_algo="max", margin=17,
             casts=single),
        dict(name="fused_order_margin2", amax_history_len=1, amax_compute_algo="most_recent", margin=2,
             casts=single),
        dict(name="fused_order_margin-17", amax_history_len=1, amax_compute_algo="most_recent",
             margin=-17, casts=single),
        dict(name="lcg_max_L16_margin1", amax_history_len=16, amax_compute_algo="max", margin=1,
             casts=scripted(lcg_plan(2026, 10, 4), 4)),
        dict(name="lcg_most_recent_L5", amax_history_len=5, amax_compute_algo="most_recent", margin=0,
             casts=scripted(lcg_plan(7, 8, 2), 2)),
    ]


def generate():
    out = {"slots": [{"name": n, "format": f, "records": w} for n, f, w in SLOTS], "scenarios": []}
    for sc in scenarios():
        sc = dict(sc)
        sc["expected"] = {mode: replay(sc, mode) for mode in ("step", "microbatch")}
        out["scenarios"].append(sc)
    return out


def dump(data):
    """Indented JSON with every list of bit patterns on one line (readable diffs)."""
    text = json.dumps(data, indent=1, sort_keys=True)
    return re.sub(r'\[\s+("0x[0-9a-f]{8}"(,\s+"0x[0-9a-f]{8}")*)\s+\]',
                  lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text) + "\n"


def main(argv):
    torch.set_flush_denormal(False)  # subnormal scales are part of the contract
    if len(argv) == 3 and argv[1] == "--check":
        with open(argv[2]) as f:
            golden = f.read()
        if golden != dump(generate()):
            print(f"{argv[2]} differs from what {argv[0]} generates now; regenerate it with\n"
                  f"  {argv[0]} {argv[2]}\nand review the diff", file=sys.stderr)
            return 1
        print(f"{argv[2]}: matches the reference")
        return 0
    if len(argv) == 2:
        with open(argv[1], "w") as f:
            f.write(dump(generate()))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
