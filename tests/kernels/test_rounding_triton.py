"""The Triton device functions in kernels/rounding.py against the torch reference, bit for bit.

Runs in the Triton CPU interpreter (TRITON_INTERPRET=1) when there is no GPU.
Outputs are poisoned before every launch; inputs mix random values with the
format's tie points and edge values; sizes are odd with masked tails.
"""

import os
import zlib

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from replayssm_quant.kernels import rounding as rd  # noqa: E402
from replayssm_quant.quant import reference as ref  # noqa: E402
from replayssm_quant.quant.philox import flat_rbits, grouped_rbits  # noqa: E402
from replayssm_quant.kernels.quantize import dequantize_elem  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
ELEM_FORMATS = ["fp32", "bf16", "fp16", "e4m3", "e5m2", "e2m1"]


@triton.jit
def _elem_kernel(x_ptr, bits_ptr, back_ptr, rb_ptr, n, seed, FMT: tl.constexpr, SR: tl.constexpr,
                 BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    g = pid * (BLOCK // 8) + tl.arange(0, BLOCK // 8)[None, :]
    rb = tl.reshape(rd.sr_bits8(seed, g, 7, 3, 1), (BLOCK,))
    bits = rd.encode_bits(x, FMT, SR, rb)
    tl.store(bits_ptr + offs, bits, mask=mask)
    tl.store(back_ptr + offs, rd.decode_bits(bits, FMT), mask=mask)
    tl.store(rb_ptr + offs, rb.to(tl.int32, bitcast=True), mask=mask)


@triton.jit
def _nvfp4_kernel(x_ptr, codes_ptr, sb_ptr, senc_ptr, y_ptr, seed, R, C, BR: tl.constexpr, BC: tl.constexpr,
                  SR: tl.constexpr):
    """One [R, C] state per program, padded to a power-of-two tile [BR, BC] (zero padding)."""
    pid = tl.program_id(0)
    r = tl.arange(0, BR)[:, None]
    c = tl.arange(0, BC)[None, :]
    m = (r < R) & (c < C)
    x = tl.load(x_ptr + pid * R * C + r * C + c, mask=m, other=0.0)
    rb = rd.sr_bits8(seed, pid * (R * C // 8) + r * (C // 8) + tl.arange(0, BC // 8)[None, :], 0, 0, 0)
    s_enc = rd.nvfp4_encode_scale(rd.nvfp4_amax(x))
    codes, sbits = rd.nvfp4_encode(x, s_enc, SR, rb)
    c2 = tl.arange(0, BC // 2)[None, :]
    tl.store(codes_ptr + pid * R * (C // 2) + r * (C // 2) + c2, codes, mask=(r < R) & (c2 < C // 2))
    c16 = tl.arange(0, BC // 16)[None, :]
    tl.store(sb_ptr + pid * R * (C // 16) + r * (C // 16) + c16, sbits, mask=(r < R) & (c16 < C // 16))
    tl.store(senc_ptr + pid, s_enc)
    tl.store(y_ptr + pid * R * C + r * C + c, rd.nvfp4_decode(codes, sbits, s_enc), mask=m)


def _edge_values(fmt):
    """Ties, neighbours, saturation edges and specials of one format (float32, both signs)."""
    vals = [0.0, 1.0, 1.5, 3.0, 6.0, 448.0, 464.0, 480.0, 57344.0, 61440.0, 65504.0, 65520.0,
            3.3895313892515355e38, 3.4e38, 1e-45, 1e-40, 1e-10, 2.0 ** -24, 2.0 ** -25, 2.0 ** -9, 2.0 ** -10,
            2.0 ** -16, 2.0 ** -17, 0.25, 0.75, 5.0, 7.0, float("inf"), float("nan")]
    x = torch.tensor(vals, dtype=torch.float32)
    if fmt not in ("fp32",):
        lo = ref.decode_bits(torch.arange(0, 1 << (ref.BITSPECS[fmt].nbits - 1)), fmt)
        lo = lo[torch.isfinite(lo)].double()
        if ref.BITSPECS[fmt].nbits == 16:   # a sample: low subnormals, a stride through the range, the top
            lo = torch.cat([lo[:40], lo[40:-40:211], lo[-40:]])
        mids = ((lo[1:] + lo[:-1]) / 2).float()
        x = torch.cat([x, lo.float(), mids, torch.nextafter(mids, torch.full_like(mids, 1e38)),
                       torch.nextafter(mids, torch.zeros_like(mids))])
    return torch.cat([x, -x])


@pytest.mark.parametrize("fmt", ELEM_FORMATS)
@pytest.mark.parametrize("sr", [False, True])
def test_encode_decode_bits_match_reference(fmt, sr):
    g = torch.Generator().manual_seed(zlib.crc32(f"{fmt}-{sr}".encode()))
    rnd = torch.randint(-2 ** 31, 2 ** 31, (1537,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    x = torch.cat([_edge_values(fmt), rnd, torch.randn(1001, generator=g) * 10.0]).to(DEV)
    n = x.numel()
    bits = torch.full((n,), 0x5A5A5A5A, dtype=torch.int32, device=DEV)
    back = torch.full((n,), float("nan"), dtype=torch.float32, device=DEV)
    rb = torch.full((n,), -7, dtype=torch.int32, device=DEV)
    seed = 1234 + int(sr)
    _elem_kernel[(triton.cdiv(n, 256),)](x, bits, back, rb, n, seed, FMT=rd.FORMAT_CODE[fmt], SR=sr, BLOCK=256)
    want_rb = grouped_rbits(seed, torch.arange((n + 7) // 8, device=DEV), 7, 3, 1)[:n]
    assert torch.equal(rb.to(torch.int64) & 0xFFFFFFFF, want_rb)
    want = ref.encode_bits(x, fmt, "sr" if sr else "rne", want_rb if sr else None)
    bad = (bits != want).nonzero()
    assert bad.numel() == 0, f"{fmt} sr={sr}: {bad.numel()} mismatches, first x={x[bad[0]].item()!r}"
    want_back = ref.decode_bits(want, fmt)
    assert torch.equal(back.view(torch.int32), want_back.view(torch.int32))


def test_hardware_cast_path_fp16(monkeypatch):
    """The GPU path (``HW_CASTS``: hardware cvt with the saturation / NaN rules put around it) equals the
    reference for fp16, the one format whose interpreter cast is also correctly rounded (bf16 and fp8 run it
    on the GPU only: scripts/gpu/formats_check.py): RNE encode of ties, saturation edges, specials and random
    bits, and the decode of all 65536 codes (NaN payloads included)."""
    monkeypatch.setattr(rd, "HW_CASTS", tl.constexpr(True))
    g = torch.Generator().manual_seed(5)
    rnd = torch.randint(-2 ** 31, 2 ** 31, (1537,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    x = torch.cat([_edge_values("fp16"), rnd]).to(DEV)
    n = x.numel()
    bits = torch.full((n,), 0x5A5A5A5A, dtype=torch.int32, device=DEV)
    back = torch.full((n,), float("nan"), dtype=torch.float32, device=DEV)
    rb = torch.zeros(n, dtype=torch.int32, device=DEV)
    _elem_kernel[(triton.cdiv(n, 256),)](x, bits, back, rb, n, 1, FMT=rd.FORMAT_CODE["fp16"], SR=False, BLOCK=256)
    want = ref.encode_bits(x, "fp16", "rne")
    bad = (bits != want).nonzero()
    assert bad.numel() == 0, f"{bad.numel()} mismatches, first x={x[bad[0]].item()!r}"
    codes = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32, device=DEV).to(torch.int16)
    got = dequantize_elem(codes, "fp16")
    assert torch.equal(got.view(torch.int32), ref.decode_bits(codes, "fp16").view(torch.int32))


@pytest.mark.parametrize("sr", [False, True])
@pytest.mark.parametrize("R,C", [(4, 16), (3, 48)])
def test_nvfp4_device_functions_match_reference(sr, R, C):
    g = torch.Generator().manual_seed(R * 100 + C + int(sr))
    T = 5
    x = torch.randn(T, R, C, generator=g) * torch.tensor([1.0, 1e-3, 1e4, 1e-30, 3.0])[:, None, None]
    x[0, 0, :16] = torch.tensor([0.0, -0.0, 6.0, -6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0,
                                 float("inf"), 1e-20, -1e-20, 2.0])
    x[1, 1, 3] = float("nan")
    x[2] = 0.0
    x[3, 0, 16 % C:] *= 1e-8
    x = x.to(DEV)
    codes = torch.full((T, R, C // 2), 0xA5, dtype=torch.uint8, device=DEV)
    sb = torch.full((T, R, C // 16), 0x33, dtype=torch.uint8, device=DEV)
    senc = torch.full((T,), float("nan"), device=DEV)
    y = torch.full((T, R, C), float("nan"), device=DEV)
    seed = 99
    _nvfp4_kernel[(T,)](x, codes, sb, senc, y, seed, R, C, BR=triton.next_power_of_2(R),
                        BC=triton.next_power_of_2(C), SR=sr)
    rb = flat_rbits(seed, T * R * C, DEV).reshape(T, R, C)
    wc, ws, we = ref.nvfp4_quantize(x, "sr" if sr else "rne", rb if sr else None)
    assert torch.equal(senc.view(torch.int32), we.view(torch.int32))
    assert torch.equal(sb, ws)
    assert torch.equal(codes, wc)
    wy = ref.nvfp4_dequantize(wc, ws, we)
    assert torch.equal(y.view(torch.int32), wy.view(torch.int32))


@triton.jit
def _nvfp4_raw_kernel(codes_ptr, out_ptr, R: tl.constexpr, C2: tl.constexpr, PTX: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    codes = tl.load(codes_ptr + r * C2 + tl.arange(0, C2)[None, :])
    tl.store(out_ptr + r * (2 * C2) + tl.arange(0, 2 * C2)[None, :], rd.nvfp4_raw(codes, PTX))


@pytest.mark.parametrize("ptx", [True, False])
@pytest.mark.parametrize("R,C2", [(16, 16), (4, 64), (128, 8), (2, 4)])
def test_nvfp4_raw_is_the_e2m1_value_times_2_pow_minus_6(R, C2, ptx):
    """``nvfp4_raw`` (the non-flush read's decode) gives each E2M1 element times 2**-6 bit for bit, signed zeros
    included: all 256 code bytes (each in several positions of the larger tiles), shuffled, in tiles of several
    shapes and so several register layouts of the packed words the GPU path converts
    (:data:`rounding._E2M1_E4M3_ASM`). In the interpreter both ``ptx`` cases check the integer path; on a GPU
    ``ptx`` checks the cvt path, without it the integer path (mamba2's non-flush read, ``nonflush_e2m1_ptx``)."""
    g = torch.Generator().manual_seed(R * 1000 + C2)
    n = R * C2
    pool = torch.arange(256, dtype=torch.int64).repeat(-(-n // 256))
    codes = pool[torch.randperm(pool.numel(), generator=g)][:n].to(torch.uint8).reshape(R, C2)
    if n >= 256:
        assert codes.unique().numel() == 256
    out = torch.full((R, 2 * C2), float("nan"), device=DEV)
    _nvfp4_raw_kernel[(1,)](codes.to(DEV), out, R=R, C2=C2, PTX=ptx)
    q, _ = ref.nvfp4_parts(codes, torch.zeros(R, 1, dtype=torch.uint8))   # (the block scales are not used here)
    want = q * 2.0 ** -6
    assert torch.equal(out.cpu().view(torch.int32), want.view(torch.int32))


@triton.jit
def _elem_codes_kernel(xs_ptr, sb_ptr, out_ptr, NBLK: tl.constexpr):
    rows = tl.program_id(0) * NBLK + tl.arange(0, NBLK)
    xs = tl.load(xs_ptr + rows[:, None] * 8 + tl.arange(0, 8)[None, :])
    s_b = tl.load(sb_ptr + rows)[:, None]
    tl.store(out_ptr + rows[:, None] * 8 + tl.arange(0, 8)[None, :], rd._nvfp4_elem_codes(xs, s_b, False, None))


def test_nvfp4_rne_codes_without_division_match_reference():
    """The division-free nvfp4 RNE element coder (per-block thresholds) equals E2M1_rne(fp32(xs / s_b))
    for every E4M3 scale (and 0), at xs = every E2M1 value and midpoint times s_b, 1-2 fp32 ulps
    either side, both signs, plus random and tiny/huge xs."""
    g = torch.Generator().manual_seed(8)
    s_vals = torch.cat([torch.zeros(1), ref.decode_bits(torch.arange(1, 0x7F), "e4m3")])
    v = ref.decode_bits(torch.arange(8), "e2m1").double()
    pts = torch.cat([v, (v[1:] + v[:-1]) / 2])                       # 15 points in units of s_b
    rows, scales = [], []
    for s_b in s_vals.tolist():
        base = (pts * max(s_b, 2.0 ** -9)).float()
        up, dn = torch.full_like(base, float("inf")), torch.zeros_like(base)
        u1, d1 = torch.nextafter(base, up), torch.nextafter(base, dn)
        x = torch.cat([base, u1, d1, torch.nextafter(u1, up), torch.nextafter(d1, dn),
                       torch.tensor([1e-45, 1e-40, 3e3]), torch.rand(10, generator=g) * 7 * s_b])   # 88 values
        x = torch.where(torch.rand(x.shape, generator=g) < 0.5, -x, x)
        rows.append(x.reshape(-1, 8))
        scales.append(torch.full((x.numel() // 8,), s_b))
    xs, sb = torch.cat(rows), torch.cat(scales)
    pad = (-xs.shape[0]) % 64
    xs = torch.cat([xs, torch.ones(pad, 8)]).to(DEV)
    sb = torch.cat([sb, torch.ones(pad)]).to(DEV)
    out = torch.full(xs.shape, -1, dtype=torch.int32, device=DEV)
    _elem_codes_kernel[(xs.shape[0] // 64,)](xs, sb, out, NBLK=64)
    q = torch.where(sb[:, None] == 0, xs * 0.0, xs / torch.where(sb == 0, 1.0, sb)[:, None])
    want = ref.encode_bits(q, "e2m1")
    bad = out != want
    assert not bad.any(), (int(bad.sum()), xs[bad][:4].tolist(), sb[bad.any(1)][:4].tolist())


@triton.jit
def _sr_paths_kernel(x_ptr, rb_ptr, fast_ptr, general_ptr, n, NB: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr,
                     MAXB: tl.constexpr, NANB: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    rb = tl.load(rb_ptr + offs, mask=m, other=0)
    tl.store(fast_ptr + offs, rd._encode_sr16(x, rb, NB, MB, BIAS, MAXB, NANB), mask=m)
    tl.store(general_ptr + offs, rd._encode_ieee(x, NB, MB, BIAS, MAXB, NANB, True, rb), mask=m)


# (NB, MB, BIAS, MAXB, NANB) of the formats that take the 16-random-bit SR path, and int8's integer format
SR16_FORMATS = {"e4m3": (8, 3, 7, 0x7E, 0x7F), "e5m2": (8, 2, 15, 0x7B, 0x7F), "e2m1": (4, 1, 1, 0x7, -1),
                "int8": (8, 7, -6, 0x7F, -1)}


@pytest.mark.parametrize("fmt", sorted(SR16_FORMATS))
def test_sr16_path_equals_the_general_rule_at_every_decision_edge(fmt):
    """``_encode_sr16`` against ``_encode_ieee``'s SR rule, bit for bit, for 16-bit random words (low half zero):
    values ``(k + j / 2**16) * unit`` and their fp32 neighbours in every binade from the target's normals down to
    far below its subnormals (the pre-shift of tiny values), with the random half at the rounding edge
    ``2**16 - j`` and next to it; zeros, fp32 subnormals, saturation, inf, NaN; both signs. Outputs poisoned."""
    NB, MB, BIAS, MAXB, NANB = SR16_FORMATS[fmt]
    g = torch.Generator().manual_seed(len(fmt) + MB)
    sub_unit = 2.0 ** (1 - BIAS - MB)
    vs = []
    for e in range(-(BIAS + MB) - 40, 9 - BIAS + (1 << (NB - 1 - MB)) + 2):   # value binades [2**e, 2**(e+1))
        unit = max(2.0 ** (e - MB), sub_unit)             # the target's spacing there
        vs.append((2.0 ** e * (1 + torch.rand(64, generator=g, dtype=torch.float64))).float())
        if unit <= 2.0 ** e:                               # values n + j / 2**16 units, n in the binade
            k = torch.randint(int(2.0 ** e / unit), int(2.0 ** (e + 1) / unit), (64,), generator=g).double()
            vs.append(((k + torch.randint(0, 1 << 16, (64,), generator=g) / 65536.0) * unit).float())
    v = torch.cat(vs)
    v = torch.cat([v, torch.nextafter(v, torch.full_like(v, 1e38)), torch.nextafter(v, torch.zeros_like(v))])
    # the random half that decides: up iff floor(frac(T) * 2**16) + r16 >= 2**16, T = |x| / unit
    unit = torch.clamp(2.0 ** (torch.floor(torch.log2(v.double())) - MB), min=sub_unit)
    T = v.double() / unit
    j = torch.floor((T - torch.floor(T)) * 65536).long()
    x = v.repeat(3)
    rb = torch.cat([(65536 - j + dr).clamp(0, 65535) for dr in (-1, 0, 1)])
    special = torch.tensor([0.0, 1e-45, 1e-40, 2.0 ** -126, 448.0, 480.0, 57344.0, 3.4e38, float("inf"),
                            float("nan")], dtype=torch.float32)
    x = torch.cat([x, special.repeat_interleave(4), torch.randn(4096, generator=g) * 2.0 ** (BIAS - 4)])
    rb = torch.cat([rb, torch.tensor([0, 1, 0x8000, 0xFFFF]).repeat(10), torch.randint(0, 1 << 16, (4096,), generator=g)])
    x = torch.cat([x, -x]).to(DEV)
    rb = ((torch.cat([rb, rb]) << 16).to(torch.int64) & 0xFFFFFFFF).to(torch.uint32).view(torch.int32).to(DEV)
    n = x.numel()
    fast = torch.full((n,), 0x5A5A, dtype=torch.int32, device=DEV)
    general = torch.full((n,), -0x5A5A, dtype=torch.int32, device=DEV)
    _sr_paths_kernel[(triton.cdiv(n, 1024),)](x, rb, fast, general, n, NB=NB, MB=MB, BIAS=BIAS, MAXB=MAXB, NANB=NANB,
                                             BLOCK=1024)
    bad = (fast != general).nonzero().flatten()
    assert bad.numel() == 0, (f"{fmt}: {bad.numel()} of {n} differ; first x={x[bad[0]].item()!r} "
                              f"r16={(rb[bad[0]].item() >> 16) & 0xFFFF} fast={fast[bad[0]].item()} "
                              f"general={general[bad[0]].item()}")
    # the edge cases are there: both roundings happen at the edge values
    assert (general != general[0]).any()
