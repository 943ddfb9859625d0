--- glimpse.dist -- several processes working as one: MPI collectives on glimpse tensors,
-- for data-parallel training (glimpse.train's `distributed = true`) and spreading a list of
-- jobs over the ranks.
--
--   local rank, size = dist.init()
--   dist.broadcast(w, 0); dist.allreduce(g, "mean"); local all = dist.allgather(x)
--   for _, job in ipairs(dist.shard(jobs)) do ... end
--
-- Under a launcher (mpirun, srun) each process is one rank; on its own it is rank 0 of 1 and
-- every call is the identity.  MPI is loaded by init() only (bindings/l_dist.c says why);
-- tensors go to MPI in place.  Ranks are 0-based: rank 0 is the root that writes and prints.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local util = require "glimpse.util"

local M = {}

local state = {rank = 0, size = 1, backend = "none"}
local started = false

local function check_tensor(fname, t)
  if not glimpse.is_tensor(t) then     -- level 3: the caller of the dist function
    check.fail(3, "glimpse.dist.%s: bad argument #1 (a tensor expected, got %s)", fname, type(t))
  end
end

--- dist.init() -> rank, size: joins the launcher's job (MPI_Init) the first time; later calls
--- return the same.  Outside a launcher: 0, 1 and no MPI.
function M.init()
  if not started then
    local rank, size, backend = glimpse._dist_init()
    state.rank, state.size, state.backend = rank, size, backend
    started = true
  end
  return state.rank, state.size
end

--- dist.rank() -> this process's rank, 0 .. size-1 (0: the root).
function M.rank()
  M.init()
  return state.rank
end

--- dist.size() -> the number of ranks (1 outside a launcher).
function M.size()
  M.init()
  return state.size
end

--- dist.backend() -> "mpi" under a launcher, "none" for a single process.
function M.backend()
  M.init()
  return state.backend
end

--- dist.is_root() -> true on rank 0, the one that writes files and prints, and in a process
--- that has not called init() (it has joined no job, so it is its own root).  Never starts MPI.
function M.is_root()
  return not started or state.rank == 0
end

--- dist.barrier(): returns when every rank has called it.
function M.barrier()
  if M.size() > 1 then glimpse._dist_barrier() end
end

--- dist.broadcast(t, root=0) -> t: rank root's values of t (any shape, the same on every
--- rank) copied into t on every rank, in place.
function M.broadcast(t, root)
  check_tensor("broadcast", t)
  root = root or 0
  local size = M.size()
  if math.type(root) ~= "integer" or root < 0 or root >= size then
    check.fail(2, "glimpse.dist.broadcast: bad argument #2 (root must be a rank 0..%d, got %s)",
               size - 1, tostring(root))
  end
  if size > 1 then glimpse._dist_broadcast(t, root) end
  return t
end

local OPS = {sum = true, mean = true, max = true, min = true}

--- dist.allreduce(t, op="sum") -> t: t (any shape, the same on every rank) replaced in place
--- by the element-wise "sum", "mean", "max" or "min" over the ranks.
function M.allreduce(t, op)
  check_tensor("allreduce", t)
  op = op or "sum"
  if not OPS[op] then
    check.fail(2, "glimpse.dist.allreduce: bad argument #2 (op must be \"sum\", \"mean\", "
               .. "\"max\" or \"min\", got %s)", tostring(op))
  end
  local size = M.size()
  if size == 1 then return t end
  glimpse._dist_allreduce(t, op == "mean" and "sum" or op)
  if op == "mean" then t:mul_(1 / size) end
  return t
end

--- dist.allgather(t) -> (size, shape...): every rank's t (shape..., the same on every rank)
--- stacked in rank order; a new tensor.
function M.allgather(t)
  check_tensor("allgather", t)
  if M.size() == 1 then return t:reshape(1, table.unpack(t.shape)):clone() end
  return glimpse._dist_allgather(t)
end

--- dist.shard(list) -> the items of list (an array) this rank takes: item i (1-based) goes to
--- rank (i - 1) % size, so the ranks split a list of jobs without talking.
function M.shard(list)
  if type(list) ~= "table" then
    check.fail(2, "glimpse.dist.shard: bad argument #1 (an array expected, got %s)", type(list))
  end
  local rank, size = M.init()
  local out = {}
  for i = rank + 1, #list, size do out[#out + 1] = list[i] end
  return out
end

--- dist.gather_tables(tbl) -> {rank 0's tbl, rank 1's tbl, ...} on every rank: tables of
--- strings, numbers, booleans and tables (JSON's kinds) from every rank, in rank order.
function M.gather_tables(tbl)
  if type(tbl) ~= "table" then
    check.fail(2, "glimpse.dist.gather_tables: bad argument #1 (a table expected, got %s)", type(tbl))
  end
  local ok, text = pcall(util.json_encode, tbl)
  if not ok then
    check.fail(2, "glimpse.dist.gather_tables: the table is not JSON: %s", check.strip(text))
  end
  if M.size() == 1 then return {util.json_decode(text)} end
  local out = {}
  for r, s in ipairs(glimpse._dist_allgather_strings(text)) do out[r] = util.json_decode(s) end
  return out
end

-- ---------------------------------------------------------------------------------------
-- gradient averaging for data-parallel training

local GradBucket = {}
GradBucket.__index = GradBucket

--- dist.GradBucket(params) -> bucket: one flat buffer that holds every parameter's gradient
--- (p.grad becomes a view of it) and four more numbers, so that averaging a step's
--- gradients over the ranks is a single allreduce.  Each rank weighs its gradient by its
--- share of the loss's normaliser (its examples or tokens), so the average is the gradient
--- the whole global batch gives in one process.
function M.GradBucket(params)
  if type(params) ~= "table" or #params == 0 then
    check.fail(2, "glimpse.dist.GradBucket: bad argument #1 (a non-empty array of tensors expected)")
  end
  local n = 0
  for i, p in ipairs(params) do
    if not glimpse.is_tensor(p) then
      check.fail(2, "glimpse.dist.GradBucket: parameter %d is a %s, expected a tensor", i, type(p))
    end
    n = n + p:numel()
  end
  local flat = glimpse.zeros(n + 4)            -- gradients, weight * loss, weight, two flags
  local views, off = {}, 1
  for i, p in ipairs(params) do
    views[i] = flat:narrow(1, off, p:numel()):reshape(table.unpack(p.shape))
    off = off + p:numel()
  end
  return setmetatable({params = params, flat = flat, grads = flat:narrow(1, 1, n),
                       views = views, n = n}, GradBucket)
end

--- bucket:attach(): zero the buffer and make every parameter's .grad its view of it again
--- (call after optimizer:zero_grad(), before backward).
function GradBucket:attach()
  self.flat:zero_()
  for i, p in ipairs(self.params) do p.grad = self.views[i] end
end

--- bucket:average(weight, loss [, flag1 [, flag2]]) -> total weight, mean loss, any flag1,
--- any flag2: scales this rank's gradients by weight (its share of the loss's normaliser; 0
--- for a rank without examples), sums the buckets over the ranks in one allreduce and
--- divides by the total weight.  loss (this rank's mean loss) comes back as the weighted mean
--- over the ranks, and each flag (a boolean: the Trainer's time guard and Ctrl-C) as true
--- when any rank set it.
function GradBucket:average(weight, loss, flag1, flag2)
  local flat, n = self.flat, self.n
  self.grads:mul_(weight)
  flat[n + 1] = weight * loss
  flat[n + 2] = weight
  flat[n + 3] = flag1 and 1 or 0
  flat[n + 4] = flag2 and 1 or 0
  M.allreduce(flat, "sum")
  local extra = flat:narrow(1, n + 1, 4):totable()
  local total = extra[2]
  if not (total > 0) then
    error("glimpse.dist: no rank had examples in this step (the global batch is empty)", 2)
  end
  self.grads:mul_(1 / total)
  return total, extra[1] / total, extra[3] > 0, extra[4] > 0
end

return M
