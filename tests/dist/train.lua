-- tests/dist/train.lua -- run by tests/test_dist.lua, alone and under `mpirun -np 2`: a small
-- Seq2Seq trained by the Trainer on a global batch of 16, writing the parameters after the
-- run (rank 0) so the test can compare a data-parallel run with a single-process one.
--   glimpse tests/dist/train.lua OUT STEPS [--distributed] [--checkpoint PATH] [--progress]
--                                 [--time-limit SECONDS [RANK]]  (RANK: on that rank only)
local glimpse = require "glimpse"
local tasks = require "datasets.seq2seq_tasks"

local out, steps = arg[1], math.tointeger(tonumber(arg[2]))
local distributed, checkpoint, progress, time_limit = false, nil, false, nil
for i = 3, #arg do
  if arg[i] == "--distributed" then distributed = true end
  if arg[i] == "--checkpoint" then checkpoint = arg[i + 1] end
  if arg[i] == "--progress" then progress = true end
  if arg[i] == "--time-limit" then
    local only = tonumber(arg[i + 2] or "")
    if not only or only == glimpse.dist.rank() then time_limit = tonumber(arg[i + 1]) end
  end
end

glimpse.set_num_threads(1)
-- lengths 3 to 8: shards differ in length and token count, so the weighting by tokens counts
local train = tasks.reversal{n = 200, min_len = 3, max_len = 8, seed = 1}
glimpse.manual_seed(1)
local model = glimpse.models.Seq2Seq{dataset = train, emb = 8, hidden = 16, attn_hidden = 8,
                                     score = "additive"}
local history = glimpse.train.Trainer{
  model = model, data = train, batch_size = 16, seed = 1, steps = steps,
  optimizer = {"Adam", lr = 1e-2}, clip = 1, progress = progress, log_every = 5,
  checkpoint = checkpoint, distributed = distributed, time_limit = time_limit,
}:fit()
if glimpse.dist.is_root() then glimpse.save(out, model:state_dict()) end
print(string.format("rank %d of %d: %d steps, loss %.6f, stopped by %s", glimpse.dist.rank(),
                    glimpse.dist.size(), history.steps, history.losses[#history.losses].loss,
                    history.stopped))
