--- glimpse.nn.conv -- nn.Conv2d, 2-D convolution.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local init = require "glimpse.nn.weight_init"
local base = require "glimpse.nn.module"

local Module = base.Module
local pair, pair_str, param, is_tensor = base.pair, base.pair_str, base.param, base.is_tensor

local M = {}

-- ---------------------------------------------------------------------------------------
-- Conv2d: x (B,C,H,W) or (C,H,W) -> (B,O,Ho,Wo); weight (O,C,kh,kw), bias (O)
-- init: weight, bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = C*kh*kw (PyTorch's)

local Conv2d = Module:extend("Conv2d")
M.Conv2d = Conv2d

Conv2d.options = options.declare("nn.Conv2d", {
  {"stride", "int|table", 1, help = "step between windows: an integer or {h, w}"},
  {"padding", "int|table", 0, help = "zeros added on each side: an integer or {h, w}"},
  {"bias", "boolean", true, help = "learn a bias per output channel"},
})

--- nn.Conv2d(cin, cout, k, {stride=1, padding=0, bias=true}) -> module; k, stride, padding:
--- an integer or {h, w}.  x (B,cin,H,W) -> (B,cout,Ho,Wo), Ho = (H + 2 padding - kh)//stride + 1
function Conv2d:init(cin, cout, k, opts)
  check.int("nn.Conv2d", "in_channels", cin, 1, nil, 3)
  check.int("nn.Conv2d", "out_channels", cout, 1, nil, 3)
  local o = Conv2d.options:check(opts, 3)
  self.in_channels, self.out_channels = cin, cout
  self.kernel_size = pair(k, "kernel_size", "nn.Conv2d", 1)
  self.stride = pair(o.stride, "stride", "nn.Conv2d", 1)
  self.padding = pair(o.padding, "padding", "nn.Conv2d", 0)
  local kh, kw = self.kernel_size[1], self.kernel_size[2]
  local bound = 1 / math.sqrt(cin * kh * kw)
  self.weight = init.uniform_(param(cout, cin, kh, kw), -bound, bound)
  if o.bias then self.bias = init.uniform_(param(cout), -bound, bound) end
end

function Conv2d:forward(x)
  local opts = {stride = self.stride, padding = self.padding}
  if is_tensor(x) and x:dim() == 3 then
    return glimpse.conv2d(x:unsqueeze(1), self.weight, self.bias, opts):squeeze(1)
  end
  return glimpse.conv2d(x, self.weight, self.bias, opts)
end

function Conv2d:extra_repr()
  local s = string.format("%d, %d, kernel_size=%s, stride=%s", self.in_channels,
                          self.out_channels, pair_str(self.kernel_size), pair_str(self.stride))
  if self.padding[1] ~= 0 or self.padding[2] ~= 0 then
    s = s .. ", padding=" .. pair_str(self.padding)
  end
  if self.bias == nil then s = s .. ", bias=false" end
  return s
end

return M
