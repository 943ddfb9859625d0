-- scripts/mlp_toy.lua -- a 2-layer MLP trained with autograd on a toy task (two interleaved
-- spirals), written with core ops only: the smallest end-to-end check that the engine learns.
--   glimpse scripts/mlp_toy.lua [steps]
local glimpse = require "glimpse"

local steps = tonumber(arg and arg[1]) or 300
local N, H = 256, 64
glimpse.manual_seed(1)

-- two spirals, labels 1 and 2
local pts, labels = {}, {}
for i = 1, N do
  local k = (i - 1) % 2
  local r = (i // 2) / (N / 2) * 3 + 0.3
  local th = r * 2.2 + k * math.pi
  pts[i] = {r * math.cos(th) / 3, r * math.sin(th) / 3}
  labels[i] = k + 1
end
local x, y = glimpse.tensor(pts), glimpse.tensor(labels)

local w1 = (glimpse.randn(H, 2) * 0.7):requires_grad()
local b1 = glimpse.zeros(H):requires_grad()
local w2 = (glimpse.randn(2, H) * 0.1):requires_grad()
local b2 = glimpse.zeros(2):requires_grad()
local params = {w1, b1, w2, b2}
local lr = 0.3

print(string.format("mlp_toy: %d points, hidden %d, %d steps of SGD lr %.2f", N, H, steps, lr))
local t0 = glimpse.clock()
for step = 1, steps do
  local logits = glimpse.linear(glimpse.linear(x, w1, b1):tanh(), w2, b2)
  local loss = glimpse.cross_entropy(logits, y)
  loss:backward()
  glimpse.no_grad(function()
    for _, p in ipairs(params) do
      p:add_(p.grad, -lr)
      p:zero_grad()
    end
  end)
  if step == 1 or step % 50 == 0 then
    local acc = glimpse.no_grad(function()
      return (logits:argmax(2):eq(y)):mean():item()
    end)
    print(string.format("step %4d  loss %.4f  accuracy %5.1f%%  (%.0f steps/s)", step, loss:item(),
                        acc * 100, step / (glimpse.clock() - t0)))
  end
end
