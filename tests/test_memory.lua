-- tests/test_memory.lua -- the caching allocator and the GC accounting keep a training loop's
-- resident size flat, and the allocator reuses blocks instead of growing.
local lu = require "luaunit"
local glimpse = require "glimpse"

local T = {}

local RSS_GROWTH_LIMIT_KB = 8 * 1024   -- between iteration 1,000 and 10,000

local function rss_kb()
  local f = io.open("/proc/self/status")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return tonumber(s:match("VmRSS:%s*(%d+)"))
end

function T.test_training_loop_keeps_a_flat_resident_size()
  if os.getenv("GLIMPSE_SANITIZED") then
    lu.skip("AddressSanitizer's quarantine holds freed memory: resident size is not ours")
  end
  glimpse.manual_seed(0)
  local w1 = (glimpse.randn(32, 64) * 0.1):requires_grad()
  local w2 = (glimpse.randn(64, 10) * 0.1):requires_grad()
  local x = glimpse.randn(16, 32)
  local y = glimpse.tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6})
  local at_1000
  for it = 1, 10000 do
    local h = x:matmul(w1):tanh()
    local loss = glimpse.cross_entropy(h:matmul(w2), y)
    loss:backward()
    glimpse.no_grad(function()
      w1:add_(w1.grad, -0.01)
      w2:add_(w2.grad, -0.01)
    end)
    w1:zero_grad()
    w2:zero_grad()
    if it == 1000 then at_1000 = rss_kb() end
  end
  local at_10000 = rss_kb()
  if not at_1000 then lu.skip("no /proc/self/status") end
  lu.assertTrue(at_10000 - at_1000 < RSS_GROWTH_LIMIT_KB,
                string.format("RSS grew from %d kB to %d kB", at_1000, at_10000))
end

function T.test_freed_blocks_are_reused_by_the_cache()
  glimpse.empty_cache()
  collectgarbage()
  local before = glimpse.memory()
  for _ = 1, 100 do
    local t = glimpse.zeros(1000)
    t:close()
  end
  local after = glimpse.memory()
  lu.assertEquals(after.live, before.live)
  lu.assertTrue(after.cached <= before.cached + 4096 * 2)
end

-- a freshly emptied cache holding one block of BIG floats; returns its bytes
local function cache_one_block(n)
  glimpse.empty_cache()
  collectgarbage()
  local t = glimpse.zeros(n)
  local live = glimpse.memory().live
  t:close()
  return live - glimpse.memory().live
end

function T.test_a_smaller_map_borrows_a_cached_bigger_block_and_gives_it_back()
  local BIG = 3 * 2 ^ 20 // 1                 -- 12 MB: above the allocator's borrowing size
  local bytes = cache_one_block(BIG)
  local cached = glimpse.memory().cached
  lu.assertTrue(cached >= bytes)
  local small = glimpse.zeros(BIG // 3)      -- a third: its own size class is empty
  lu.assertEquals(glimpse.memory().cached, cached - bytes)   -- no new block from the system
  small:close()
  lu.assertEquals(glimpse.memory().cached, cached)          -- back, whole, to its own class
  local again = glimpse.zeros(BIG)
  lu.assertEquals(glimpse.memory().cached, cached - bytes)
  again:close()
  -- more than four times smaller, or below the borrowing size: a block of its own
  local tiny = glimpse.zeros(BIG // 5)
  lu.assertEquals(glimpse.memory().cached, cached)
  tiny:close()
  glimpse.empty_cache()
end

-- an activation that only an add, a relu, a reshape or a sum reads is not kept for backward:
-- once the Lua handle is gone its bytes go back, and the gradients are the same
function T.test_activations_no_backward_reads_are_given_back_before_backward()
  glimpse.manual_seed(3)
  local N = 256 * 1024                                   -- 1 MiB of floats per activation
  local x = glimpse.randn(N):requires_grad()
  local w = glimpse.randn(N):requires_grad()
  local function forward()
    local h = x * w                  -- mul reads both inputs: x, w kept (they are leaves)
    local a = h * 2                  -- h: read by nothing below but the mul by a scalar
    local r = (a + 1):relu()         -- a + 1: read by the relu only; relu keeps its output
    local s = r:reshape(512, 512):exp():sum()   -- exp keeps its output, sum nothing
    return s
  end
  collectgarbage(); collectgarbage()
  local base = glimpse.memory().live
  local s = forward()
  collectgarbage(); collectgarbage()
  local held = glimpse.memory().live - base
  -- kept: relu's output (saved, and the reshape's view of it) and exp's (saved), 2 MiB;
  -- given back: h, a and a + 1, which every op kept until backward before (5 MiB)
  lu.assertTrue(held <= 2 * N * 4 + 65536, ("%d bytes held for backward, 2 MiB expected")
                :format(held))
  s:backward()
  local gx = x.grad:clone()
  -- the same gradient by hand: d/dx exp(relu(2xw + 1)) = exp(...) * [2xw + 1 > 0] * 2w
  local want = glimpse.no_grad(function()
    local z = x * w * 2 + 1
    return z:relu():exp() * (z:gt(0)) * w * 2
  end)
  lu.assertTrue((gx - want):abs():max():item() <= 1e-4 * want:abs():max():item())
end

return T
