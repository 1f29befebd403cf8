"""fd.ops has nvFuser's op names: every name of nvfuser_direct's `fd.ops` (its Python binding,
April 2026) is one of fuser's ops or is listed, with the reason, among those not provided. A
new nvFuser op goes into one of the two; a name provided later leaves NOT_PROVIDED."""
from fuser import FusionDefinition

NVFUSER_OPS = """
abs acos acosh add addcmul argsort asin asinh atan atan2 atanh bitwise_and bitwise_left_shift
bitwise_not bitwise_or bitwise_right_shift bitwise_xor broadcast broadcast_in_dim cast cat ceil
clamp complex cos cosh cummax cummin cumprod cumsum cutlass_nvfp4_grouped_mm div embedding_fwd eq
erf erfc erfcinv erfinv exp exp2 expand expm1 floor fmod frac full gather gcd ge grouped_mm gt
imag index_select iota isfinite isinf isnan isneginf isposinf isreal le lerp lgamma linear log
log10 log1p log2 logical_and logical_not logical_or logical_right_shift lt matmul max maximum min
minimum mod mul ne neg nextafter normal nv_block_quantize nv_grouped_block_quantize pad permute
pow preprocess_grouped_matmul_input_sf prod rand_like randn_like real reciprocal relu remainder
reshape round rsqrt scaled_mm scatter sdpfa_bwd sdpfa_fwd segment_set select set shape sigmoid
sign signbit silu sin sinh size slice sqrt squeeze stride_order sub sum take_along_axis tan tanh
threshold topk triu truediv trunc uniform var var_mean welford where
""".split()

BLACKWELL_FP4 = "block-scaled fp4 (nvfp4) for Blackwell's tensor cores; fuser targets Hopper"
NOT_PROVIDED = {
    "complex": "building complex tensors from real and imaginary parts",
    "cutlass_nvfp4_grouped_mm": BLACKWELL_FP4,
    "nv_block_quantize": BLACKWELL_FP4,
    "nv_grouped_block_quantize": BLACKWELL_FP4,
    "preprocess_grouped_matmul_input_sf": BLACKWELL_FP4,
}
FUSER_EXTENSIONS = {"sort"}  # torch.sort's values and indices, which fuser.jit lowers to


def test_every_nvfuser_op_is_provided_or_listed():
    have = set(dir(FusionDefinition().ops))
    missing = [name for name in NVFUSER_OPS if name not in have and name not in NOT_PROVIDED]
    assert not missing, f"nvFuser ops neither in fd.ops nor in NOT_PROVIDED: {missing}"
    provided_now = [name for name in NOT_PROVIDED if name in have]
    assert not provided_now, f"provided now, drop them from NOT_PROVIDED: {provided_now}"


def test_fd_ops_adds_only_its_documented_extensions():
    assert set(dir(FusionDefinition().ops)) - set(NVFUSER_OPS) == FUSER_EXTENSIONS
