"""CosmoFlow-specific facts (the registry-wide contract is tests/test_workloads.py)."""
from __future__ import annotations

from harness.config import registry
from workloads.cosmoflow.flops import forward_flops
from workloads.cosmoflow.synth import PREDICT_MEAN_MAE

WL = registry.get("cosmoflow")


def test_tiny_target_is_well_below_predicting_the_mean():
    assert WL.sizes["tiny"].quality_target <= 0.5 * PREDICT_MEAN_MAE


def test_full_size_forward_flops_match_the_reference_estimate():
    """mlperf_hpc.md: ~68.9 GFLOP forward per 128^3 sample (convs + linears)."""
    fwd, _ = forward_flops(WL.sizes["full"])
    assert abs(fwd / 1e9 - 68.9) < 0.1


# The reference's layer table at full size (mlcommons/hpc cosmoflow/models/cosmoflow.py with
# configs/cosmo.yaml, v1.0+: conv_size 32, kernel 3, 5 conv layers, fc 128/64, dropout 0.5;
# ../shared/reference/mlperf_hpc.md 1.2): layer, output shape (channels last, as Keras), params.
REFERENCE_LAYERS = [
    ("Conv3D 3^3 same + LeakyReLU(0.3) + MaxPool3D(2)", (64, 64, 64, 32), 3_488),
    ("Conv3D 3^3 same + LeakyReLU(0.3) + MaxPool3D(2)", (32, 32, 32, 64), 55_360),
    ("Conv3D 3^3 same + LeakyReLU(0.3) + MaxPool3D(2)", (16, 16, 16, 128), 221_312),
    ("Conv3D 3^3 same + LeakyReLU(0.3) + MaxPool3D(2)", (8, 8, 8, 256), 884_992),
    ("Conv3D 3^3 same + LeakyReLU(0.3) + MaxPool3D(2)", (4, 4, 4, 512), 3_539_456),
    ("Flatten (D, H, W, C order)", (32_768,), 0),
    ("Dense 128 + LeakyReLU(0.3) + Dropout(0.5)", (128,), 4_194_432),
    ("Dense 64 + LeakyReLU(0.3) + Dropout(0.5)", (64,), 8_256),
    ("Dense 4, tanh, x1.2", (4,), 260),
]


def test_full_size_layers_match_the_reference_table():
    """Each layer's output shape and parameter count at 128^3 x 4, read off our model on the meta device."""
    import torch
    size = WL.sizes["full"]
    with torch.device("meta"):
        model = WL.build_model(size)
        x = torch.empty(1, 4, 128, 128, 128)
    ours = []
    for i in range(size.conv_layers):
        conv, act, pool = model.convs[3 * i: 3 * i + 3]
        x = pool(act(conv(x)))
        assert conv.kernel_size == (3, 3, 3) and conv.padding == (1, 1, 1) and act.negative_slope == 0.3
        ours.append((tuple(x.permute(0, 2, 3, 4, 1).shape[1:]), sum(p.numel() for p in conv.parameters())))
    ours.append(((x[0].numel(),), 0))
    for fc in (model.fc1, model.fc2, model.out):
        ours.append(((fc.out_features,), sum(p.numel() for p in fc.parameters())))
    assert ours == [(shape, params) for _, shape, params in REFERENCE_LAYERS]
    assert model.drop.p == 0.5 and sum(p for *_, p in REFERENCE_LAYERS) == 8_907_556


def test_same_function_as_the_reference_built_in_keras(monkeypatch):
    """The reference's model, built the way its build_model builds it (Keras layers: Conv3D
    'same', LeakyReLU with Keras' default slope, MaxPool3D, Flatten, Dense, Dropout, tanh and
    the x1.2 Lambda) in Keras 3 on its torch backend, with our weights copied in: the same
    outputs, so padding, pooling, the flatten order and the head are Keras' own."""
    import numpy as np
    import torch
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    import keras  # a dev dependency: on its torch backend, no TensorFlow needed
    layers = keras.layers
    size = WL.sizes["tiny"]
    torch.manual_seed(0)
    ours = WL.build_model(size).eval()
    ref = keras.Sequential([keras.Input(size.input_shape)])
    for i in range(size.conv_layers):
        ref.add(layers.Conv3D(size.base_channels * 2 ** i, kernel_size=3, padding="same"))
        ref.add(layers.LeakyReLU())
        ref.add(layers.MaxPool3D(pool_size=2))
    ref.add(layers.Flatten())
    for n in (size.fc1, size.fc2):
        ref.add(layers.Dense(n))
        ref.add(layers.LeakyReLU())
        ref.add(layers.Dropout(size.dropout))
    ref.add(layers.Dense(size.n_targets, activation="tanh"))
    ref.add(layers.Lambda(lambda t: t * 1.2))
    convs = [m for m in ours.convs if isinstance(m, torch.nn.Conv3d)]
    weights = []
    for m in convs:  # Keras kernels: (kd, kh, kw, in, out); Dense: (in, out)
        weights += [m.weight.detach().permute(2, 3, 4, 1, 0).numpy(), m.bias.detach().numpy()]
    for m in (ours.fc1, ours.fc2, ours.out):
        weights += [m.weight.detach().T.numpy(), m.bias.detach().numpy()]
    ref.set_weights(weights)
    x = np.log1p(np.random.default_rng(0).integers(0, 30, (2, *size.input_shape))).astype(np.float32)
    want = np.asarray(keras.ops.convert_to_numpy(ref(x, training=False)))
    with torch.no_grad():
        got = ours(torch.from_numpy(x).permute(0, 4, 1, 2, 3)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.abs(want).max() > 0.05  # the outputs are not all ~0, so the comparison has teeth
