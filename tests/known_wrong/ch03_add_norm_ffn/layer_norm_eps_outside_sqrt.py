# cell: layer_norm
# loses: test_layer_norm
# why: adds eps to the standard deviation instead of the variance (std + eps); only eps = 1 shows it
#| export attnlab/norm.py
def layer_norm(x, weight, bias, eps=1e-5):
    if x.shape[-1:] != weight.shape or weight.shape != bias.shape:
        raise ValueError("weight and bias must match the last dimension of x")
    std = x.var(-1, keepdim=True, unbiased=False).sqrt()
    return (x - x.mean(-1, keepdim=True)) / (std + eps) * weight + bias
