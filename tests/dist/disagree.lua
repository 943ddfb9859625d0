-- tests/dist/disagree.lua -- run by tests/test_dist_agree.lua under mpirun -np 2: collectives
-- whose arguments differ between the ranks fail on every rank with one message, and the
-- ranks go on in step afterwards.
local dist = glimpse.dist
dist.init()
local r = dist.rank()
local function try(name, f)
  local ok, err = pcall(f)
  print(string.format("rank %d %s: %s", r, name, ok and "ok" or (tostring(err):gsub("^[^\n]-:%d+: ", ""))))
end
try("count", function() dist.allreduce(glimpse.ones(r == 0 and 4 or 8), "sum") end)
try("op", function() dist.allreduce(glimpse.ones(3), r == 0 and "sum" or "max") end)
try("shape", function() dist.allreduce(glimpse.ones(r == 0 and 2 or 3, r == 0 and 3 or 2), "sum") end)
try("gather", function() dist.allgather(glimpse.ones(r == 0 and 2 or 5)) end)
try("call", function() if r == 0 then dist.barrier() else dist.broadcast(glimpse.ones(2), 0) end end)
try("root", function() dist.broadcast(glimpse.ones(2), r) end)
try("good", function()
  local t = dist.allreduce(glimpse.ones(3), "sum")
  assert(t[1]:item() == 2, "sum over two ranks")
end)
