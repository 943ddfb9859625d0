-- tests/dist/collectives.lua -- run by tests/test_dist.lua under `mpirun -np 2`: every
-- glimpse.dist call once on each rank; rank 0 writes what every rank saw (gathered) as JSON
-- to arg[1], for the test to check.
local glimpse = require "glimpse"
local util = require "glimpse.util"
local dist = glimpse.dist

local rank, size = dist.init()
local again_rank, again_size = dist.init()          -- idempotent
local seen = {rank = rank, size = size, backend = dist.backend(), is_root = dist.is_root(),
              init_again = {again_rank, again_size}}

-- rank 0 holds 1..4, rank 1 holds 2..8 (shape 2x2); a view shares the storage, so it sees
-- an in-place result without any copy back
local function input() return glimpse.tensor({{1, 2}, {3, 4}}) * (rank + 1) end
for _, op in ipairs({"sum", "mean", "max", "min"}) do
  local x = input()
  local view = x:reshape(4)
  local back = dist.allreduce(x, op)
  seen[op] = view:totable()
  seen[op .. "_returns_its_argument"] = rawequal(back, x)
end

local b = glimpse.full({3}, rank + 7)
dist.broadcast(b, 1)
seen.broadcast_from_1 = b:totable()

local g = dist.allgather(glimpse.tensor({{rank, 10 * rank, 100 * rank}}))
seen.allgather_shape = g.shape
seen.allgather = g:reshape(2, 3):totable()

seen.shard = dist.shard({"a", "b", "c", "d", "e"})
seen.tables = dist.gather_tables({rank = rank, word = "w" .. rank, list = {rank, rank + 1}})
seen.bad_root = select(2, pcall(dist.broadcast, b, 2))
seen.bad_op = select(2, pcall(dist.allreduce, b, "prod"))

-- the Trainer's data-parallel mode refuses what it cannot split over 2 ranks
local model = glimpse.nn.Linear(1, 1)
local function trainer(o)
  o.model, o.optimizer, o.steps, o.distributed = model, {"SGD", lr = 0.1}, 1, true
  o.loss = function(m, x) return m(x):sum() end
  return select(2, pcall(glimpse.train.Trainer, o))
end
seen.generated_data = trainer({data = function() return glimpse.ones(1, 1) end})
seen.small_batch = trainer({data = {n = 4, collate = function() return glimpse.ones(1, 1) end},
                            batch_size = 1})
dist.barrier()

local all = dist.gather_tables(seen)
if rank == 0 then util.write_json(arg[1], all) end
