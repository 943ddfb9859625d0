-- tests/captioner_helpers.lua -- what the captioner suites share (test_captioner.lua,
-- test_captioner_hard.lua, test_caption_eval.lua): a tiny captioner on 16x16 grey images
-- (a 4x4 grid, L = 16), batches of word lists, tolerances.
local lu = require "luaunit"
local glimpse = require "glimpse"
local Captioner = require("glimpse.models.captioner").Captioner

local Vocab = glimpse.data.Vocab

local M = {}

M.EXACT = 1e-6          -- values computed the same way twice / by hand in double precision
M.FLOAT_TOL = 1e-4      -- a float32 sum checked against a double-precision hand value

M.WORDS = {"a", "red", "blue", "circle", "square", "above", "below"}
M.CAPS = {{"a", "red", "circle"}, {"a", "blue", "square", "above", "a", "red", "circle"},
          {"a", "square"}}
M.CAPS2 = {{"a", "red", "circle"}, {"a", "blue", "square", "above", "a", "red", "circle"}}

--- tiny(o) -> a captioner of 16x16 grey images, two conv blocks -> a 4x4 grid; o: more options
function M.tiny(o)
  local opts = {vocab = Vocab.new(M.WORDS), encoder = {in_channels = 1, channels = {4, 6}},
                emb = 6, hidden = 8, attn_hidden = 5, max_len = 6}
  for k, v in pairs(o or {}) do opts[k] = v end
  return Captioner(opts)
end

--- hard(o) -> tiny with hard attention
function M.hard(o)
  local opts = {attention = "hard"}
  for k, v in pairs(o or {}) do opts[k] = v end
  return M.tiny(opts)
end

--- batch(captions) -> {images, captions_in, captions_out, lengths, mask}: B random images
--- and captions of the given word lists
function M.batch(captions)
  local v = Vocab.new(M.WORDS)
  local cin, cout = {}, {}
  for k, words in ipairs(captions) do
    local ids = v:encode(words)
    cin[k] = {Vocab.START, table.unpack(ids)}
    cout[k] = {table.unpack(ids)}
    cout[k][#ids + 1] = Vocab.END
  end
  local pad = glimpse.data.batches.pad
  local b = {images = glimpse.rand(#captions, 1, 16, 16)}
  b.captions_in = pad(cin, {pad = Vocab.PAD})
  b.captions_out, b.lengths, b.mask = pad(cout, {pad = Vocab.PAD})
  return b
end

function M.tmpfile(suffix)
  return os.tmpname() .. suffix
end

--- assert_error_matches(patterns, fn, ...): fn(...) fails with a message holding every one of
--- patterns (a string or a list of strings)
function M.assert_error_matches(patterns, fn, ...)
  if type(patterns) == "string" then patterns = {patterns} end
  local ok, err = pcall(fn, ...)
  lu.assertFalse(ok, "expected an error matching " .. table.concat(patterns, ", "))
  for _, p in ipairs(patterns) do lu.assertStrContains(tostring(err), p) end
end

return M
