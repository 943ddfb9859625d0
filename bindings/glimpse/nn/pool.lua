--- glimpse.nn.pool -- pooling: nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local base = require "glimpse.nn.module"

local Module = base.Module
local pair, pair_str, is_tensor = base.pair, base.pair_str, base.is_tensor

local M = {}

-- ---------------------------------------------------------------------------------------
-- pooling: x (B,C,H,W) or (C,H,W) -> (B,C,Ho,Wo)

local function pool_class(name, fn)
  local cls = Module:extend(name)
  local owner = "nn." .. name
  cls.options = options.declare(owner, {
    {"stride", "int|table", nil, help = "step between windows: an integer or {h, w} " ..
                                        "(default: the kernel size)"},
    {"padding", "int|table", 0, help = "padding on each side: an integer or {h, w}"},
  })
  --- nn.MaxPool2d(k, stride=k, padding=0) / nn.AvgPool2d(...): each an integer or {h, w};
  --- also nn.MaxPool2d(k, {stride=, padding=})
  function cls:init(k, stride, padding)
    local o
    if type(stride) == "table" and stride[1] == nil and padding == nil then
      o = cls.options:check(stride, 3)
    else
      o = cls.options:check({stride = stride, padding = padding}, 3)
    end
    self.kernel_size = pair(k, "kernel_size", owner, 1)
    self.stride = o.stride == nil and {self.kernel_size[1], self.kernel_size[2]}
                  or pair(o.stride, "stride", owner, 1)
    self.padding = pair(o.padding, "padding", owner, 0)
  end
  function cls:forward(x)
    if not is_tensor(x) or (x:dim() ~= 3 and x:dim() ~= 4) then
      check.fail(2, "%s: input must be a (B,C,H,W) or (C,H,W) tensor, got %s", owner,
                 is_tensor(x) and "shape " .. check.shape(x) or type(x))
    end
    if x:dim() == 3 then
      return fn(x:unsqueeze(1), self.kernel_size, self.stride, self.padding):squeeze(1)
    end
    return fn(x, self.kernel_size, self.stride, self.padding)
  end
  function cls:extra_repr()
    local function s(p) return p[1] == p[2] and tostring(p[1]) or pair_str(p) end
    return string.format("kernel_size=%s, stride=%s, padding=%s", s(self.kernel_size),
                         s(self.stride), s(self.padding))
  end
  return cls
end

M.MaxPool2d = pool_class("MaxPool2d", glimpse.max_pool2d)
M.AvgPool2d = pool_class("AvgPool2d", glimpse.avg_pool2d)

-- ---------------------------------------------------------------------------------------
-- AdaptiveAvgPool2d: x (B,C,H,W) or (C,H,W) -> (B,C,oh,ow); cell (i,j) averages rows
-- floor(i*H/oh) .. ceil((i+1)*H/oh)-1 and the same for columns (PyTorch's windows, which
-- overlap or repeat when H is not a multiple of oh, or smaller than it).

local AdaptiveAvgPool2d = Module:extend("AdaptiveAvgPool2d")
M.AdaptiveAvgPool2d = AdaptiveAvgPool2d

--- nn.AdaptiveAvgPool2d(size) -> module; size an integer or {oh, ow}
function AdaptiveAvgPool2d:init(size)
  self.output_size = pair(size, "output size", "nn.AdaptiveAvgPool2d", 1)
  self._pool_mats = {}            -- (H*W, oh*ow) averaging matrices by input size
end

-- The (H*W, oh*ow) matrix whose column (i,j) holds 1/count on the cells of window (i,j).
local function pool_matrix(H, W, oh, ow)
  local rows = {}
  for p = 1, H * W do
    local r = {}
    for q = 1, oh * ow do r[q] = 0 end
    rows[p] = r
  end
  for i = 0, oh - 1 do
    local y0, y1 = (i * H) // oh, ((i + 1) * H + oh - 1) // oh
    for j = 0, ow - 1 do
      local x0, x1 = (j * W) // ow, ((j + 1) * W + ow - 1) // ow
      local v = 1 / ((y1 - y0) * (x1 - x0))
      for y = y0, y1 - 1 do
        for x = x0, x1 - 1 do rows[y * W + x + 1][i * ow + j + 1] = v end
      end
    end
  end
  return glimpse.tensor(rows)
end

function AdaptiveAvgPool2d:forward(x)
  if not is_tensor(x) or (x:dim() ~= 3 and x:dim() ~= 4) then
    check.fail(2, "nn.AdaptiveAvgPool2d: expected a (B,C,H,W) or (C,H,W) tensor, got %s",
               check.shape(x))
  end
  local single = x:dim() == 3
  if single then x = x:unsqueeze(1) end
  local B, C, H, W = table.unpack(x.shape)
  local oh, ow = self.output_size[1], self.output_size[2]
  local y
  if H == oh and W == ow then
    y = x
  elseif H % oh == 0 and W % ow == 0 then      -- equal, disjoint windows: plain pooling
    y = glimpse.avg_pool2d(x, {H // oh, W // ow})
  else
    local key = H .. "x" .. W
    local P = self._pool_mats[key]
    if not P then
      P = pool_matrix(H, W, oh, ow)
      self._pool_mats[key] = P
    end
    y = x:reshape(B * C, H * W):matmul(P):reshape(B, C, oh, ow)
  end
  if single then y = y:squeeze(1) end
  return y
end

function AdaptiveAvgPool2d:extra_repr()
  return string.format("output_size=(%d, %d)", self.output_size[1], self.output_size[2])
end

return M
