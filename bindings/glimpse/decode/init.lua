--- glimpse.decode -- sequence decoding for trained seq2seq and captioning models: greedy,
-- beam search (GNMT length penalty, n-best lists, alignments) and sampling (temperature,
-- top-k, nucleus).  It knows nothing of the model: the caller gives a step function
--
--   log_probs (N,V), new_state [, attention (N,S)] = step(tokens (N), state, t)
--
-- and the state every row of which the decoder reorders itself (index_select on dim 1) to
-- follow the surviving beams and drop finished rows; docs/api/decode.md has the contract.
-- Everything runs under glimpse.no_grad.  greedy.lua: greedy and sample; beam.lua: beam;
-- shared.lua: the options (decode.options.greedy/sample/beam/reorder) and the state plumbing.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local S = require "glimpse.decode.shared"
local greedy = require "glimpse.decode.greedy"
local beam = require "glimpse.decode.beam"

local M = {}

M.greedy, M.sample, M.beam = greedy.greedy, greedy.sample, beam.beam

--- decode.MAX_BEAM: the widest beam decode.beam accepts (batch*beam rows of state live at once)
M.MAX_BEAM = beam.MAX_BEAM

--- decode.options: each entry point's options, declared once (decode.options.beam:lines())
M.options = {greedy = S.OPTIONS, sample = S.SAMPLE_OPTIONS, beam = S.BEAM_OPTIONS,
             reorder = S.REORDER_OPTIONS}

--- decode.reorder(state, idx, {rows=N, keep={...}}) -> a new state whose tensors are
-- index_select(1, idx) of the old ones (idx: a Lua table or tensor of 1-based rows).
-- Tables are copied (the input is left as it was), shared tensors and tables stay shared,
-- other values pass through.  rows: the row count every tensor must have; keep: tensors
-- or tables that are not per row (weights cached beside the per-row tensors), passed
-- through as they are.
function M.reorder(state, idx, opts)
  if type(idx) ~= "table" and not glimpse.is_tensor(idx) then
    check.fail(2, "decode.reorder: idx must be a table or tensor of 1-based row indices, got %s",
               type(idx))
  end
  local o = S.checked(S.REORDER_OPTIONS, opts, 2)
  local ok, r = pcall(S.reorder_value, state, idx, o.rows, "state", S.keep_memo(o.keep),
                      "decode.reorder")
  if not ok then
    if type(r) ~= "table" then r = "decode.reorder: " .. check.strip(r) end
    error(type(r) == "table" and r.decode_error or r, 2)
  end
  return r
end

-- for the tests, which also swap in a full-sort reference for the per-row candidate cut
M._row_best = S.row_best
function M._set_row_best(f) S.row_best = f end
-- and beam search's ranking step: the engine's, and the same in Lua over the row cut
M._candidates, M._candidates_lua = S.candidates, S.candidates_lua
function M._set_candidates(f) S.candidates = f end

return M
