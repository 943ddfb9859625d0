-- scripts/demo.lua -- what `make demo` runs: the main job in miniature.  A seq2seq model with
-- additive attention learns to reverse digit strings (a short run of scripts/seq2seq.lua
-- --quick), prints its progress and accuracy (greedy, then beam search of width 3 through
-- glimpse.decode), and writes alignment heatmaps.  Where that script is not available it
-- falls back to the autograd toy (scripts/mlp_toy.lua).
local function script_dir()
  local src = debug.getinfo(1, "S").source:sub(2)
  return src:match("^(.*)/[^/]*$") or "."
end

local dir = script_dir()
local seq2seq = dir .. "/seq2seq.lua"
local f = io.open(seq2seq)
if f then
  f:close()
  arg = {[-1] = arg[-1], [0] = seq2seq, "--quick", "--score", "additive", "--beam", "3", "--out", "out/demo"}
  dofile(seq2seq)
else
  arg = {[0] = dir .. "/mlp_toy.lua", "300"}
  dofile(dir .. "/mlp_toy.lua")
end
