"""Models: layer structure, shapes with leading batch dims, uint8 pixels."""

from __future__ import annotations

import pytest
import torch
from rl_modules import MLP, ConvNet, DuelingCnnDQNet, NatureCNN
from torch import nn


def test_mlp_depth_widths_activation_norm_dropout():
    net = MLP(in_features=4, out_features=2, num_cells=[16, 8], activation_class=nn.ReLU,
              norm_class=nn.LayerNorm, dropout=0.1)
    kinds = [type(m) for m in net]
    assert kinds == [nn.Linear, nn.LayerNorm, nn.ReLU, nn.Dropout, nn.Linear, nn.LayerNorm, nn.ReLU,
                     nn.Dropout, nn.Linear]
    assert [m.out_features for m in net if isinstance(m, nn.Linear)] == [16, 8, 2]
    assert net(torch.randn(3, 5, 4)).shape == (3, 5, 2)
    default = MLP(in_features=4, out_features=1)
    assert [m.out_features for m in default if isinstance(m, nn.Linear)] == [32, 32, 32, 1]
    assert isinstance(default[1], nn.Tanh)


def test_mlp_output_shape_lazy_input_and_concatenated_inputs():
    net = MLP(out_features=(2, 3), depth=1, num_cells=8)
    assert net(torch.randn(5, 7)).shape == (5, 2, 3)
    q = MLP(in_features=5, out_features=1, depth=2, num_cells=16)
    assert q(torch.randn(4, 3), torch.randn(4, 2)).shape == (4, 1)
    last = MLP(
        in_features=3, out_features=2, depth=0, bias_last_layer=False, activate_last_layer=True
    )
    assert last[0].bias is None and isinstance(last[-1], nn.Tanh)
    with pytest.raises(
        ValueError, match="depth: expected len\\(num_cells\\)=2 or None, received 3"
    ):
        MLP(in_features=3, num_cells=[4, 4], depth=3)


def test_convnet_shapes_leading_dims_and_uint8():
    net = ConvNet(in_features=3, num_cells=[8, 16], kernel_sizes=[3, 3], strides=[1, 2])
    x = torch.randint(0, 256, (2, 5, 3, 12, 12), dtype=torch.uint8)
    out = net(x)
    assert out.shape == (2, 5, 16 * 4 * 4)  # 12 -> 10 (3x3) -> 4 (3x3, stride 2)
    torch.testing.assert_close(out, net(x.float() / 255))
    with pytest.raises(
        ValueError, match="strides: expected one value per layer \\(2\\), received 3"
    ):
        ConvNet(in_features=3, num_cells=[8, 16], strides=[1, 2, 3])


def _nchw_reference(net: ConvNet, x: torch.Tensor) -> torch.Tensor:
    """``net``'s layers run on NCHW copies of its weights and input: the layout it replaces."""
    out = x.reshape(-1, *x.shape[-3:]).float().contiguous()
    for layer in net.layers:
        if isinstance(layer, nn.Conv2d):
            out = torch.nn.functional.conv2d(out, layer.weight.contiguous(), layer.bias,
                                             layer.stride, layer.padding)
        else:
            out = layer(out)
    return out.reshape(*x.shape[:-3], *out.shape[1:])


@pytest.mark.parametrize("lazy", [False, True])
def test_convnet_runs_channels_last_with_the_values_and_gradients_of_nchw(lazy):
    torch.manual_seed(0)
    net = ConvNet(in_features=None if lazy else 4, num_cells=[8, 16], kernel_sizes=[5, 3],
                  strides=[2, 1], activation_class=nn.ReLU)
    x = torch.rand(2, 3, 4, 20, 20)
    out = net(x)  # materialises a lazy first layer
    convs = [m for m in net.layers if isinstance(m, nn.Conv2d)]
    assert all(c.weight.is_contiguous() for c in convs)  # torch's layout: in-place inits work
    nn.init.orthogonal_(convs[0].weight)  # as CleanRL's layer_init does (it views the weight)
    seen = []
    net.layers[0].register_forward_pre_hook(lambda _, args: seen.append(args[0]))
    out = net(x)
    assert seen[0].is_contiguous(memory_format=torch.channels_last)  # what the first layer got
    expected = _nchw_reference(net, x)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    grads = torch.autograd.grad(out.square().sum(), [c.weight for c in convs])
    reference = torch.autograd.grad(expected.square().sum(), [c.weight for c in convs])
    for grad, ref in zip(grads, reference, strict=True):
        assert grad.shape == ref.shape
        torch.testing.assert_close(grad, ref, rtol=1e-4, atol=1e-5)


def test_nature_cnn_matches_the_paper():
    net = NatureCNN(in_channels=4, num_actions=6)
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size[0], c.stride[0]) for c in convs] == [
        (32, 8, 4),
        (64, 4, 2),
        (64, 3, 1),
    ]
    # 3 conv layers + 3136 -> 512 -> 6, as in Mnih et al. (2015)
    expected = (
        (4 * 32 * 64 + 32)
        + (32 * 64 * 16 + 64)
        + (64 * 64 * 9 + 64)
        + (3136 * 512 + 512)
        + (512 * 6 + 6)
    )
    assert sum(p.numel() for p in net.parameters()) == expected
    assert net(torch.zeros(7, 4, 84, 84, dtype=torch.uint8)).shape == (7, 6)


def test_dueling_head_is_value_plus_centred_advantage():
    net = DuelingCnnDQNet(5, cnn_kwargs={"in_features": 4}, mlp_kwargs={"num_cells": 32})
    x = torch.rand(3, 4, 84, 84)
    h = net.features(x)
    adv, value = net.advantage(h), net.value(h)
    torch.testing.assert_close(net(x), value + adv - adv.mean(-1, keepdim=True))
    torch.testing.assert_close(net(x).mean(-1, keepdim=True), value)


def test_convnet_takes_torchrl_aggregator_and_squeeze_output():
    # TorchRL's dqn_with_rnn: a pooling aggregator, then the [.., C, 1, 1] output squeezed
    net = ConvNet(num_cells=[8, 16], squeeze_output=True, aggregator_class=nn.AdaptiveAvgPool2d,
                  aggregator_kwargs={"output_size": (1, 1)})
    x = torch.rand(4, 5, 3, 12, 12)
    out = net(x)
    assert out.shape == (4, 5, 16)
    convs = net.layers[:-2]
    ref = convs(x.reshape(20, 3, 12, 12)).mean((-2, -1)).reshape(4, 5, 16)
    torch.testing.assert_close(out, ref)


def test_mlp_norm_kwargs_may_name_num_features_as_torchrls_scripts_do():
    mlp = MLP(4, 2, num_cells=[8, 8], norm_class=nn.BatchNorm1d,
              norm_kwargs={"num_features": 8, "momentum": 0.01})
    norms = [m for m in mlp.modules() if isinstance(m, nn.BatchNorm1d)]
    assert [n.num_features for n in norms] == [8, 8] and norms[0].momentum == 0.01
    with pytest.raises(ValueError, match=r"norm_kwargs: num_features=16 does not match .* 8"):
        MLP(4, 2, num_cells=[8, 8], norm_class=nn.BatchNorm1d, norm_kwargs={"num_features": 16})
