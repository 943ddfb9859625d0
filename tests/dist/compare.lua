-- tests/dist/compare.lua -- run by tests/test_dist.lua under `mpirun -np 2`: a two-configuration
-- compare grid through glimpse.compare.run, with the second configuration (rank 1's) broken
-- when --break is given, so that the test sees rank 1's failure reported on rank 0 and the
-- configuration run again by the next (unbroken) invocation.  Rank 1 works in a folder of its
-- own (OUT-rank1), as on a machine that does not share rank 0's file system: its results must
-- reach OUT through the ranks' messages.
--   glimpse tests/dist/compare.lua OUT [--break]
local glimpse = require "glimpse"
local compare = glimpse.compare

local out, broken = arg[1], arg[2] == "--break"
if glimpse.dist.rank() == 1 then out = out .. "-rank1" end
local configs = compare.grid{mechanisms = {"additive/soft", "rnnenc"}, tasks = {"reversal"},
                             seeds = 1, settings = compare.settings{
                               steps = 10, eval_every = 10, train_n = 100, valid_n = 10,
                               test_n = 5, test_lengths = {10}}}
if broken then
  local c = {}
  for k, v in pairs(configs[2]) do c[k] = v end
  c.task = "no-such-task"
  configs[2] = c
end
local rows, records, failures = compare.run{configs = configs, out = out, say = function() end}
if rows then
  local ids = {}
  for _, f in ipairs(failures) do ids[#ids + 1] = f.id end
  print(string.format("rank %d: %d records, %d failed (%s)", glimpse.dist.rank(), #records,
                      #failures, table.concat(ids, ",")))
else
  print(string.format("rank %d: no outputs", glimpse.dist.rank()))
end
