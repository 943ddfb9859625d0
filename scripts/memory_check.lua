-- scripts/memory_check.lua -- resident size of a small training loop at iteration 1,000 and
-- 10,000 (the caching allocator and GC accounting should keep it flat).
--   glimpse scripts/memory_check.lua
local glimpse = require "glimpse"

local function rss_kb()
  local f = assert(io.open("/proc/self/status"))
  local s = f:read("a")
  f:close()
  return tonumber(s:match("VmRSS:%s*(%d+)"))
end

glimpse.manual_seed(0)
local w1 = (glimpse.randn(32, 64) * 0.1):requires_grad()
local w2 = (glimpse.randn(64, 10) * 0.1):requires_grad()
local x = glimpse.randn(16, 32)
local y = glimpse.tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6})
local t0 = glimpse.clock()
for it = 1, 10000 do
  local loss = glimpse.cross_entropy(x:matmul(w1):tanh():matmul(w2), y)
  loss:backward()
  glimpse.no_grad(function()
    w1:add_(w1.grad, -0.01)
    w2:add_(w2.grad, -0.01)
  end)
  w1:zero_grad()
  w2:zero_grad()
  if it == 1 or it == 1000 or it == 10000 then
    local m = glimpse.memory()
    print(string.format("iteration %5d  RSS %6d kB  tensors live %d kB, cached %d kB  loss %.4f",
                        it, rss_kb(), m.live // 1024, m.cached // 1024, loss:item()))
  end
end
print(string.format("%.1f us per iteration", (glimpse.clock() - t0) / 10000 * 1e6))
