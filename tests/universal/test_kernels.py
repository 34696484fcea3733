"""Every universal kernel, bit for bit against the spec's scalar reference, on awkward shapes
(k = 1, tails that are no multiple of a vector width) and at 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reprodqn.universal import backend, convolution, cpu, layers, product
from reprodqn.universal import reference as ref

f32 = np.float32


def bits(values) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values, f32)).view(np.uint32)


def same(a, b) -> bool:
    return np.array_equal(bits(a), bits(b))


def test_fma32_reference_is_the_correctly_rounded_fma():
    """The reference's exact fma against LLVM's, over values whose product and sum round."""
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(200_000).astype(f32) * f32(scale) for scale in (1e3, 1e-3, 1))
    tiny = np.finfo(f32).tiny
    a = np.concatenate([a, [tiny, -tiny, 0.0, -0.0, 1.0, 3e38]]).astype(f32)
    b = np.concatenate([b, [0.5, 0.5, -0.0, 0.0, -1.0, 10.0]]).astype(f32)
    c = np.concatenate([c, [0.0, 0.0, -0.0, -0.0, 1.0, 0.0]]).astype(f32)
    out = torch.empty(a.shape)
    tensors = [torch.from_numpy(v) for v in (a, b, c)]
    backend.kernels_for(out).fma_elementwise(*tensors, out)
    assert same(out.numpy(), ref.fma32(a, b, c))
    # where rounding through binary64 is wrong: a * b + c = 1 + 2^-23 + 2^-24 - 2^-60, just
    # under a binary32 midpoint; binary64 rounds it onto the midpoint, which then ties to even
    a1, b1 = f32((1 + 2**-18) * 2**-12), f32((1 - 2**-18) * 2**-12)
    c1 = f32(1 + 2**-23)
    naive = f32(np.float64(a1) * np.float64(b1) + np.float64(c1))
    assert naive == f32(1 + 2**-22)
    assert ref.fma32(a1, b1, c1) == c1


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 1, 5), (7, 33, 17), (5, 64, 40), (2, 9, 130)])
def test_gemm_is_the_reference_chain(shape, threads):
    rows, depth, width = shape
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal((1, rows, depth)).astype(f32)
    b = rng.standard_normal((3, depth, width)).astype(f32)
    out = torch.empty((3, rows, width))
    cpu.set_threads(threads)
    try:
        backend.kernels_for(out).gemm(torch.from_numpy(a), torch.from_numpy(b), out)
    finally:
        cpu.set_threads(1)
    for n in range(3):
        assert same(out[n].numpy(), ref.chain(a[0], b[n]))


@pytest.mark.parametrize("block_depth", [32, 33, 1000])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(1, 70, 40), (13, 65, 3), (7, 96, 33), (100, 67, 17)])
def test_gemm_cut_into_blocks_of_k_is_one_chain(shape, threads, block_depth):
    """Each block of k carries on from C as the last one left it (the tiles' `load`): the
    chain is the reference's at every cut, whole or not, every row count a tile has
    (1 to 6, and runs of row blocks), and columns past a panel's edge."""
    rows, depth, width = shape
    rng = np.random.default_rng(rows * depth)
    a = rng.standard_normal((2, rows, depth)).astype(f32)
    b = rng.standard_normal((1, depth, width)).astype(f32)
    out = np.empty((2, rows, width), f32)
    product.gemm(a, b, out, parallel=threads > 1, block_depth=block_depth)
    for n in range(2):
        assert same(out[n], ref.chain(a[n], b[0]))


def test_one_thread_runs_no_thread_pool():
    """At one thread the kernels are the ones compiled without numba's parallel layer, and
    the count asked for is the count applied (a pool left at the core count spins on a
    core another process needs)."""
    import numba

    cpu.set_threads(2)
    try:
        assert numba.get_num_threads() == min(2, numba.config.NUMBA_NUM_THREADS)
        assert cpu.kernels() is cpu._kernels(numba.config.NUMBA_NUM_THREADS > 1)
    finally:
        cpu.set_threads(1)
    assert cpu.threads() == 1
    assert cpu.kernels() is cpu._kernels(False)


@pytest.mark.parametrize("kernel, stride, side", [(3, 2, 11), (4, 1, 9), (8, 4, 20)])
def test_windows_read_in_place_are_im2cols_copy(kernel, stride, side):
    """A convolution's windows gathered from its input (the forward's A, k cut into blocks;
    transposed, the weight gradient's A) give the products of im2col's copy, bit for bit."""
    rng = np.random.default_rng(kernel * side)
    x = rng.standard_normal((3, 5, side, side)).astype(f32)
    copied = np.ascontiguousarray(ref.im2col(x, kernel, stride).transpose(0, 2, 1))
    windows = convolution.windows(x, kernel, stride)
    weights = rng.standard_normal((1, copied.shape[2], 7)).astype(f32)
    ours, theirs = (np.empty((3, copied.shape[1], 7), f32) for _ in range(2))
    product.gemm(windows, weights, ours, block_depth=32)
    product.gemm(copied, weights, theirs)
    assert same(ours, theirs)
    assert same(theirs[1], ref.chain(copied[1], weights[0]))
    dy = rng.standard_normal((3, 7, copied.shape[1])).astype(f32)
    ours_w = np.empty((7, copied.shape[2]), f32)
    convolution.weight_gradient(dy, windows, ours_w)
    dy_rows = dy.transpose(1, 0, 2).reshape(7, -1)
    assert same(ours_w, ref.chain(dy_rows, copied.reshape(-1, copied.shape[2])))


def test_packed_weights_give_the_products_of_the_weights():
    """pack's panels (from a matrix, or from W itself for W^T) are only another layout."""
    rng = np.random.default_rng(8)
    a = rng.standard_normal((2, 5, 70)).astype(f32)
    w = rng.standard_normal((37, 70)).astype(f32)
    ours, theirs = (np.empty((2, 5, 37), f32) for _ in range(2))
    product.gemm(a, product.pack(w.T[None]), ours)
    product.gemm(a, np.ascontiguousarray(w.T)[None], theirs)
    assert same(ours, theirs)
    assert same(product.pack(w.T[None]), product.pack(np.ascontiguousarray(w.T)[None]))


def test_gemm_order_matters():
    """The chain's order is what the test pins: a sum in another order differs here."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 200)).astype(f32), rng.standard_normal((200, 6)).astype(f32)
    reversed_order = ref.chain(a[:, ::-1], b[::-1])
    assert not same(ref.chain(a, b), reversed_order)


def _conv_case(seed, batch=2, channels=3, side=11, out_c=4, kernel=3, stride=2):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, channels, side, side)).astype(f32)
    w = rng.standard_normal((out_c, channels, kernel, kernel)).astype(f32)
    b = rng.standard_normal(out_c).astype(f32)
    return x, w, b


@pytest.mark.parametrize(
    "kernel,stride,side", [(3, 2, 11), (3, 2, 12), (4, 2, 10), (2, 1, 5), (1, 1, 3)]
)
def test_conv2d_forward_and_gradients_are_the_reference(kernel, stride, side):
    x, w, b = _conv_case(kernel * 10 + stride, kernel=kernel, stride=stride, side=side)
    layer = layers.Conv2d(3, 4, kernel, stride)
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(w))
        layer.bias.copy_(torch.from_numpy(b))
    xt = torch.from_numpy(x).requires_grad_(True)
    y = layer(xt)
    expected = ref.conv2d(x, w, b, stride)
    assert same(y.detach().numpy(), expected)
    grad_y = np.random.default_rng(7).standard_normal(y.shape).astype(f32)
    y.backward(torch.from_numpy(grad_y))
    grad_x, grad_w, grad_b = ref.conv2d_grads(x, w, grad_y, stride)
    assert same(xt.grad.numpy(), grad_x)
    assert same(layer.weight.grad.numpy(), grad_w)
    assert same(layer.bias.grad.numpy(), grad_b)


@pytest.mark.parametrize("batch,inputs,outputs", [(1, 7, 3), (5, 33, 17), (32, 64, 4)])
def test_linear_forward_and_gradients_are_the_reference(batch, inputs, outputs):
    rng = np.random.default_rng(batch + inputs)
    x = rng.standard_normal((batch, inputs)).astype(f32)
    layer = layers.Linear(inputs, outputs)
    w, b = layer.weight.detach().numpy().copy(), layer.bias.detach().numpy().copy()
    xt = torch.from_numpy(x).requires_grad_(True)
    y = layer(xt)
    assert same(y.detach().numpy(), ref.linear(x, w, b))
    grad_y = rng.standard_normal(y.shape).astype(f32)
    y.backward(torch.from_numpy(grad_y))
    grad_x, grad_w, grad_b = ref.linear_grads(x, w, grad_y)
    assert same(xt.grad.numpy(), grad_x)
    assert same(layer.weight.grad.numpy(), grad_w)
    assert same(layer.bias.grad.numpy(), grad_b)


def test_relu_and_scaling_are_the_reference():
    x = torch.tensor([-1.0, -0.0, 0.0, 2.5, 1e-45], dtype=torch.float32, requires_grad=True)
    y = layers.ReLU()(x)
    assert same(y.detach().numpy(), ref.relu(x.detach().numpy()))
    assert bits(y.detach().numpy())[1] == 0  # -0 became +0
    y.backward(torch.ones(5))
    assert same(x.grad.numpy(), ref.relu_grad(np.ones(5, f32), y.detach().numpy()))
    frames = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 16, 16)
    assert same(layers.scale_frames(frames).numpy(), ref.scale_frames(frames.numpy()))


def test_a_nan_stops_the_run_naming_the_op():
    layer = layers.Linear(3, 2)
    with pytest.raises(layers.NumericsError, match="linear gave a NaN"):
        layer(torch.tensor([[1.0, float("nan"), 0.0]]))


def test_denormals_are_kept(kernel_backend):
    if kernel_backend == "triton":
        from reprodqn.universal import cuda

        assert cuda.denormals_kept(torch.device("cpu"))
    else:
        assert cpu.denormals_kept()


def test_a_forked_tensors_gradients_meet_in_one_rounded_add():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    first, second = layers.fork(x)
    g1 = np.array([1e8, 0.1, -0.0], f32)
    g2 = np.array([1.0, 0.2, -0.0], f32)
    torch.autograd.backward([first, second], [torch.from_numpy(g1), torch.from_numpy(g2)])
    assert same(x.grad.numpy(), g1 + g2)


def test_the_dueling_head_and_its_gradient_are_torchs_to_rounding():
    rng = np.random.default_rng(12)
    v, a = rng.standard_normal((9, 1)).astype(f32), rng.standard_normal((9, 5)).astype(f32)
    g = rng.standard_normal((9, 5)).astype(f32)
    ours_v, ours_a = (torch.from_numpy(x).requires_grad_(True) for x in (v, a))
    q = layers.dueling(ours_v, ours_a)
    q.backward(torch.from_numpy(g))
    theirs_v, theirs_a = (torch.from_numpy(x).double().requires_grad_(True) for x in (v, a))
    expected = theirs_v + (theirs_a - theirs_a.mean(dim=1, keepdim=True))
    expected.backward(torch.from_numpy(g).double())
    assert np.allclose(q.detach().numpy(), expected.detach().numpy(), atol=1e-6)
    assert np.allclose(ours_v.grad.numpy(), theirs_v.grad.numpy(), atol=1e-5)
    assert np.allclose(ours_a.grad.numpy(), theirs_a.grad.numpy(), atol=1e-6)
    # the spec's order, bit for bit: the mean a sum from +0 in column order, then / A
    total = np.zeros(9, f32)
    for column in range(5):
        total = total + a[:, column]
    assert same(q.detach().numpy(), v + (a - (total / f32(5))[:, None]))


@pytest.mark.parametrize(
    "settings", [{"padding": 1}, {"stride": (2, 1)}, {"dilation": 2}, {"kernel_size": (3, 2)}]
)
def test_a_convolution_it_does_not_compute_is_refused_where_it_computes(settings):
    """However its weights came (here a torch model's state dict, no init_), a universal
    Conv2d with padding, an uneven stride, dilation or a non-square kernel is refused in
    one line naming its settings, not computed wrongly."""
    shape = {"kernel_size": 3, **settings}
    theirs = torch.nn.Conv2d(3, 4, **shape)
    ours = layers.Conv2d(3, 4, **shape)
    ours.load_state_dict(theirs.state_dict())
    with pytest.raises(layers.NumericsError, match=r"Conv2d \(kernel .* needs a square kernel"):
        ours(torch.zeros(1, 3, 12, 12))
