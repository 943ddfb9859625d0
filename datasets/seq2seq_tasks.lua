--- datasets/seq2seq_tasks.lua (glimpse.data.seq2seq) -- small sequence-to-sequence tasks made
-- from a seed, for attention experiments that train in minutes on a CPU:
--   reversal  "48213"          -> "31284"
--   sorting   "48213"          -> "12348"        (digits ascending)
--   dates     "march 3rd 1998" -> "1998-03-03"   (several surface forms, all unambiguous)
-- Tokens are characters.  Ids are 1-based with the specials of datasets/vocab.lua first:
-- 1 <pad>, 2 <start>, 3 <end>, 4 <unk>, then the task's characters.
--
--   local tasks = require "datasets.seq2seq_tasks"
--   local ds = tasks.reversal{n = 10000, min_len = 5, max_len = 20, seed = 1}
--   local b = ds:collate({1, 2, 3})
--   -- b.src (3,S) ids, b.src_mask (3,S), b.src_lengths {..}; b.tgt_in (3,T) = <start> y,
--   -- b.tgt_out (3,T) = y <end>, b.tgt_mask (3,T), b.tgt_lengths {..} (counting <end>)
--
-- A dataset of one's own pairs is the same class (tasks.from_pairs, tasks.from_file: TSV or
-- JSON lines; characters or words as tokens; optional alignments, then batches carry align).
local Rng = require "glimpse.data.rng"
local Vocab = require "glimpse.data.vocab"
local batches = require "glimpse.data.batches"
local check = require "glimpse.check"
local options = require "glimpse.options"
local util = require "glimpse.util"

local M = {}

M.DIGITS = "0123456789"
M.MONTHS = {"january", "february", "march", "april", "may", "june", "july", "august",
            "september", "october", "november", "december"}
M.MONTHS_SHORT = {"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov",
                  "dec"}
M.WEEKDAYS = {"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}
--- characters of the date task's source side, and of its target side
M.DATE_SRC_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789 ,"
M.DATE_TGT_CHARS = "0123456789-"

--- surface forms of a date; each function gets (y, m, d) and returns the text
M.DATE_FORMATS = {
  month_ordinal = function(y, m, d) return string.format("%s %s %d", M.MONTHS[m], M.ordinal(d), y) end,
  day_month = function(y, m, d) return string.format("%d %s %d", d, M.MONTHS[m], y) end,
  short_comma = function(y, m, d) return string.format("%s %d, %d", M.MONTHS_SHORT[m], d, y) end,
  month_comma = function(y, m, d) return string.format("%s %d, %d", M.MONTHS[m], d, y) end,
  day_short = function(y, m, d) return string.format("%d %s %d", d, M.MONTHS_SHORT[m], y) end,
  ordinal_of = function(y, m, d) return string.format("%s of %s %d", M.ordinal(d), M.MONTHS[m], y) end,
  weekday = function(y, m, d)
    return string.format("%s %s %d %d", M.WEEKDAYS[M.weekday(y, m, d)], M.MONTHS[m], d, y)
  end,
}
M.DATE_FORMAT_NAMES = {"month_ordinal", "day_month", "short_comma", "month_comma", "day_short",
                       "ordinal_of", "weekday"}

--- tasks.ordinal(d) -> "1st", "2nd", "3rd", "4th", "11th", "22nd" ...
function M.ordinal(d)
  local suffix = "th"
  if d % 100 < 11 or d % 100 > 13 then
    suffix = ({"st", "nd", "rd"})[d % 10] or "th"
  end
  return d .. suffix
end

--- tasks.is_leap(y) -> boolean (Gregorian).
function M.is_leap(y)
  return (y % 4 == 0 and y % 100 ~= 0) or y % 400 == 0
end

--- tasks.days_in_month(y, m) -> 28..31.
function M.days_in_month(y, m)
  if m == 2 then return M.is_leap(y) and 29 or 28 end
  return ({31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31})[m]
end

--- tasks.weekday(y, m, d) -> 1..7 for sunday..saturday (Sakamoto's method, Gregorian).
function M.weekday(y, m, d)
  local t = {0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4}
  if m < 3 then y = y - 1 end
  return (y + y // 4 - y // 100 + y // 400 + t[m] + d) % 7 + 1
end

--- tasks.iso_date(y, m, d) -> "YYYY-MM-DD".
function M.iso_date(y, m, d)
  return string.format("%04d-%02d-%02d", y, m, d)
end

-- ---------------------------------------------------------------------------------------
-- the dataset object

local Seq2Seq = {}
Seq2Seq.__index = Seq2Seq
M.Seq2Seq = Seq2Seq

local function make_dataset(task, src, tgt, src_vocab, tgt_vocab, extra)
  local ds = setmetatable({task = task, n = #src, src = src, tgt = tgt, src_vocab = src_vocab,
                           tgt_vocab = tgt_vocab, src_ids = {}, tgt_ids = {}, lengths = {}},
                          Seq2Seq)
  for i = 1, #src do
    ds.src_ids[i] = src_vocab:encode(src[i])
    ds.tgt_ids[i] = tgt_vocab:encode(tgt[i])
    ds.lengths[i] = #src[i]
  end
  for k, v in pairs(extra or {}) do ds[k] = v end
  return ds
end

--- tasks.dataset(task, src, tgt, src_vocab, tgt_vocab, extra) -> a dataset of this class from
--- lists of source and target strings (or token lists) and the two vocabularies; extra's
--- fields are copied in (other task families, e.g. datasets/compare_tasks.lua, build on it).
M.dataset = make_dataset

--- ds:size() -> number of examples.
function Seq2Seq:size() return self.n end

--- ds:collate(indices) -> batch table:
---   src (B,S) ids, src_mask (B,S), src_lengths {B};
---   tgt_in (B,T) = <start> y_1..y_m, tgt_out (B,T) = y_1..y_m <end>, tgt_mask (B,T),
---   tgt_lengths {B} (m + 1); src_text, tgt_text (lists of strings); indices; and when the
---   dataset has alignments (ds.align), align (B,T) beside tgt_out (1-based source
---   positions, 0: none, <end>, padding).
--- Padding is id 1 (<pad>) and mask 0.
function Seq2Seq:collate(indices)
  local src, tin, tout, st, tt = {}, {}, {}, {}, {}
  for k, i in ipairs(indices) do
    if not self.src[i] then error("seq2seq: index " .. tostring(i) .. " outside 1.." .. self.n, 2) end
    src[k] = self.src_ids[i]
    local y = self.tgt_ids[i]
    local a, b = {Vocab.START}, {}
    for t = 1, #y do a[t + 1] = y[t]; b[t] = y[t] end
    b[#y + 1] = Vocab.END
    tin[k], tout[k] = a, b
    st[k], tt[k] = self.src[i], self.tgt[i]
  end
  local batch = {indices = indices, src_text = st, tgt_text = tt}
  batch.src, batch.src_lengths, batch.src_mask = batches.pad(src)
  batch.tgt_in = batches.pad(tin)
  batch.tgt_out, batch.tgt_lengths, batch.tgt_mask = batches.pad(tout)
  if self.align then
    local rows = {}
    for k, i in ipairs(indices) do
      local a = self.align[i]
      local r = table.move(a, 1, #a, 1, {})
      r[#a + 1] = 0                               -- <end>
      rows[k] = r
    end
    batch.align = batches.pad(rows, {pad = 0, length = batch.tgt_out.shape[2]})
  end
  return batch
end

--- ds:decode_src(ids) / ds:decode_tgt(ids) -> string (ids: table or 1-D tensor; stops at
--- <end>); tokens joined by ds.separator ("" for characters, " " for words).
function Seq2Seq:decode_src(ids)
  return table.concat(self.src_vocab:decode(ids), self.separator or "")
end
function Seq2Seq:decode_tgt(ids)
  return table.concat(self.tgt_vocab:decode(ids), self.separator or "")
end

-- the fields holding one entry per example, cut by ds:split
local PER_EXAMPLE = {"src", "tgt", "src_ids", "tgt_ids", "lengths", "dates", "formats", "align",
                     "src_tokens", "tgt_tokens"}

--- ds:split(k) -> two datasets: the first k examples and the rest (same vocabularies).
function Seq2Seq:split(k)
  local function part(a, b)
    local sub = {}
    for key, v in pairs(self) do sub[key] = v end
    for _, key in ipairs(PER_EXAMPLE) do
      if self[key] then sub[key] = table.move(self[key], a, b, 1, {}) end
    end
    sub.n = #sub.src
    return setmetatable(sub, Seq2Seq)
  end
  return part(1, k), part(k + 1, self.n)
end

-- ---------------------------------------------------------------------------------------
-- tasks

local function digit_opts(name, opts)
  opts = opts or {}
  local o = {n = opts.n or 1000, min_len = opts.min_len or 5, max_len = opts.max_len or 20,
             seed = opts.seed or 1, digits = opts.digits or M.DIGITS}
  if math.type(o.n) ~= "integer" or o.n < 0 then error(name .. ": n must be a count", 3) end
  if math.type(o.min_len) ~= "integer" or o.min_len < 1 or o.max_len < o.min_len then
    error(string.format("%s: bad length range %s..%s", name, tostring(o.min_len),
                        tostring(o.max_len)), 3)
  end
  return o
end

local function random_digits(rng, o)
  local L = rng:int(o.min_len, o.max_len)
  local c = {}
  for t = 1, L do
    local k = rng:int(1, #o.digits)
    c[t] = o.digits:sub(k, k)
  end
  return c
end

--- tasks.reversal{n=1000, min_len=5, max_len=20, seed=1, digits="0123456789"} -> dataset of
--- digit strings and their reversals.
function M.reversal(opts)
  local o = digit_opts("reversal", opts)
  local rng = Rng.new(o.seed, "seq2seq.reversal")
  local src, tgt = {}, {}
  for i = 1, o.n do
    local c = random_digits(rng, o)
    local r = {}
    for t = 1, #c do r[t] = c[#c + 1 - t] end
    src[i], tgt[i] = table.concat(c), table.concat(r)
  end
  local v = Vocab.chars(o.digits)
  return make_dataset("reversal", src, tgt, v, v)
end

--- tasks.sorting{n=1000, min_len=5, max_len=20, seed=1, digits="0123456789"} -> dataset of
--- digit strings and the same digits in ascending order.
function M.sorting(opts)
  local o = digit_opts("sorting", opts)
  local rng = Rng.new(o.seed, "seq2seq.sorting")
  local src, tgt = {}, {}
  for i = 1, o.n do
    local c = random_digits(rng, o)
    src[i] = table.concat(c)
    table.sort(c)
    tgt[i] = table.concat(c)
  end
  local v = Vocab.chars(o.digits)
  return make_dataset("sorting", src, tgt, v, v)
end

--- tasks.dates{n=1000, seed=1, min_year=1950, max_year=2049, formats=all} -> dataset of dates
--- written in words ("march 3rd 1998", "3 march 1998", "mar 3, 1998", "march 3, 1998",
--- "3 mar 1998", "3rd of march 1998", "tuesday march 3 1998") and their ISO forms
--- ("1998-03-03").  formats: a list of names from tasks.DATE_FORMAT_NAMES.  Extra fields:
--- ds.dates[i] = {y, m, d}, ds.formats[i] = the format's name.
function M.dates(opts)
  opts = opts or {}
  local n = opts.n or 1000
  local y0, y1 = opts.min_year or 1950, opts.max_year or 2049
  local names = opts.formats or M.DATE_FORMAT_NAMES
  if math.type(n) ~= "integer" or n < 0 then error("dates: n must be a count", 2) end
  if y0 < 1000 or y1 > 9999 or y1 < y0 then error("dates: years must lie in 1000..9999", 2) end
  for _, f in ipairs(names) do
    if not M.DATE_FORMATS[f] then error("dates: unknown format '" .. tostring(f) .. "'", 2) end
  end
  local rng = Rng.new(opts.seed or 1, "seq2seq.dates")
  local src, tgt, dates, fmts = {}, {}, {}, {}
  for i = 1, n do
    local y = rng:int(y0, y1)
    local m = rng:int(1, 12)
    local d = rng:int(1, M.days_in_month(y, m))
    local f = names[rng:int(1, #names)]
    src[i] = M.DATE_FORMATS[f](y, m, d)
    tgt[i] = M.iso_date(y, m, d)
    dates[i], fmts[i] = {y, m, d}, f
  end
  return make_dataset("dates", src, tgt, Vocab.chars(M.DATE_SRC_CHARS),
                      Vocab.chars(M.DATE_TGT_CHARS), {dates = dates, formats = fmts})
end

-- ---------------------------------------------------------------------------------------
-- datasets from one's own pairs

local PAIRS_OPTIONS = options.declare("seq2seq.from_pairs", {
  {"tokens", "string", "chars", choices = {"chars", "words"},
   help = "how a string is split: into characters (UTF-8), or into words at whitespace"},
  {"src_vocab", "table", nil,
   help = "the source vocabulary (a glimpse.data.Vocab or a token list); default: built"},
  {"tgt_vocab", "table", nil,
   help = "the target vocabulary (a glimpse.data.Vocab or a token list); default: built"},
  {"shared_vocab", "boolean", false,
   help = "one vocabulary for both sides (built from both, or the one given)"},
  {"min_count", "int", 1, range = {1},
   help = "a built vocabulary keeps the tokens seen at least this often"},
  {"name", "string", "pairs", help = "the dataset's task name (ds.task, kept in a model's config)"},
})
M.FROM_PAIRS_OPTIONS = PAIRS_OPTIONS

local FILE_OPTIONS = PAIRS_OPTIONS:extend("seq2seq.from_file", {
  {"format", "string", nil, choices = {"tsv", "jsonl"},
   help = "tsv or jsonl; default: from the extension (.tsv .txt, .jsonl .json), else the first line"},
})
M.FROM_FILE_OPTIONS = FILE_OPTIONS

-- the tokens that would be read as padding or sequence marks
local RESERVED = {["<pad>"] = true, ["<start>"] = true, ["<end>"] = true}

-- one side of a pair -> token list, or nil and why
local function tokenize(x, words)
  if type(x) == "string" then
    local t = {}
    if words then
      for w in x:gmatch("%S+") do t[#t + 1] = w end
    else
      local ok, bad = utf8.len(x)
      if not ok then return nil, string.format("is not valid UTF-8 (byte %d)", bad) end
      for c in x:gmatch(utf8.charpattern) do t[#t + 1] = c end
    end
    return t
  end
  if type(x) ~= "table" then return nil, "must be a string or a list of tokens, got " .. type(x) end
  local t, keys = {}, 0
  for _ in pairs(x) do keys = keys + 1 end
  if keys ~= #x then return nil, "must be a list of tokens (a table with keys 1..n)" end
  for i, w in ipairs(x) do
    if type(w) ~= "string" or w == "" then
      return nil, string.format("token %d must be a non-empty string, got %s", i, check.value(w))
    end
    t[i] = w
  end
  return t
end

-- a vocabulary given as an option: a Vocab, a token list, or a full list (specials first)
local function vocab_option(v, what, fname, level)
  if getmetatable(v) == Vocab.Vocab then return v end
  local ok, r = pcall(v[1] == Vocab.SPECIALS[1] and Vocab.from_list or Vocab.new, v)
  if not ok then
    check.fail(level + 1, "%s: option '%s' must be a glimpse.data.Vocab or a list of tokens: %s",
               fname, what, check.strip(r))
  end
  return r
end

-- The dataset from the pairs, checked: fname names the public function, where(i) the pair,
-- level the frame of the public function's caller (1: build_pairs)
local function build_pairs(list, o, fname, where, level)
  local words = o.tokens == "words"
  local src_tok, tgt_tok, src_text, tgt_text, align = {}, {}, {}, {}, {}
  local with, without                       -- the first pairs with and without an alignment
  local sep = words and " " or ""
  for i, pr in ipairs(list) do
    local function bad(fmt, ...)
      check.fail(level + 1, "%s: %s: " .. fmt, fname, where(i), ...)
    end
    if type(pr) ~= "table" then bad("a pair must be a table {src, tgt} or {src=, tgt=}, got %s", type(pr)) end
    local src, tgt, al = pr.src, pr.tgt, pr.align
    if src == nil and tgt == nil then src, tgt, al = pr[1], pr[2], pr[3] end
    local s, why = tokenize(src, words)
    if not s then bad("the source %s", why) end
    if #s == 0 then bad("the source is empty") end
    local t, why2 = tokenize(tgt, words)
    if not t then bad("the target %s", why2) end
    for _, side in ipairs({{"source", s}, {"target", t}}) do
      for _, w in ipairs(side[2]) do
        if RESERVED[w] then
          bad("the %s has the token '%s', a special of the vocabularies", side[1], w)
        end
      end
    end
    if al ~= nil then
      if without then
        bad("has an alignment but %s has none (give every pair an alignment, or none)",
            where(without))
      end
      with = with or i
      if type(al) ~= "table" then bad("the alignment must be a list of source positions, got %s", type(al)) end
      if #al ~= #t then
        bad("the alignment has %d entr%s for %d target token%s", #al, #al == 1 and "y" or "ies",
            #t, #t == 1 and "" or "s")
      end
      local a = {}
      for j = 1, #t do
        local v = math.tointeger(al[j])
        if not v or v < 0 or v > #s then
          bad("alignment entry %d must be a source position in 0..%d (0: none), got %s", j, #s,
              check.value(math.tointeger(al[j]) or al[j]))
        end
        a[j] = v
      end
      align[i] = a
    else
      if with then
        bad("has no alignment but %s has one (give every pair an alignment, or none)",
            where(with))
      end
      without = without or i
    end
    src_tok[i], tgt_tok[i] = s, t
    src_text[i] = type(src) == "string" and src or table.concat(s, sep)
    tgt_text[i] = type(tgt) == "string" and tgt or table.concat(t, sep)
  end
  local sv = o.src_vocab and vocab_option(o.src_vocab, "src_vocab", fname, level)
  local tv = o.tgt_vocab and vocab_option(o.tgt_vocab, "tgt_vocab", fname, level)
  if o.shared_vocab then
    if sv and tv and sv ~= tv then
      check.fail(level, "%s: shared_vocab takes one vocabulary; src_vocab and tgt_vocab " ..
                 "were both given", fname)
    end
    local v = sv or tv
    if not v then
      local all = table.move(src_tok, 1, #src_tok, 1, {})
      table.move(tgt_tok, 1, #tgt_tok, #all + 1, all)
      v = Vocab.build(all, {min_count = o.min_count})
    end
    sv, tv = v, v
  end
  sv = sv or Vocab.build(src_tok, {min_count = o.min_count})
  tv = tv or Vocab.build(tgt_tok, {min_count = o.min_count})
  local ds = make_dataset(o.name, src_tok, tgt_tok, sv, tv,
                          {align = with and align or nil, separator = sep,
                           tokens = o.tokens})
  ds.src_tokens, ds.tgt_tokens = ds.src, ds.tgt
  ds.src, ds.tgt = src_text, tgt_text
  return ds
end

--- seq2seq.from_pairs(pairs, {tokens="chars", src_vocab=, tgt_vocab=, shared_vocab=false,
---   min_count=1, name="pairs"}) -> dataset: a dataset of one's own {src, tgt} pairs
-- pairs[i] = {src, tgt} or {src, tgt, align} or {src=, tgt=, align=}: src and tgt strings
-- (split into characters, or into words at whitespace with tokens = "words") or lists of
-- tokens; align (optional, all pairs or none) lists for each target token the 1-based source
-- position it comes from (0: none), and batches then carry align (B,T).  Vocabularies are
-- built from the pairs (most frequent first; min_count drops rare tokens) unless given (a
-- glimpse.data.Vocab or a token list; tokens outside it read as <unk>).  The dataset is the
-- generators' class: ds.n, ds.src/ds.tgt (strings), ds.src_tokens/ds.tgt_tokens, ds.src_ids,
-- ds.tgt_ids, ds.src_vocab, ds.tgt_vocab, ds.align, ds:collate, ds:split, ds:decode_tgt; it
-- trains a models.Seq2Seq{dataset = ds} with the Trainer and evaluates with models.eval.
function M.from_pairs(list, opts)
  local fname = "seq2seq.from_pairs"
  if type(list) ~= "table" then
    check.fail(2, "%s: pairs must be a list of {src, tgt} pairs, got %s", fname, type(list))
  end
  if #list == 0 then check.fail(2, "%s: pairs is empty", fname) end
  local o = PAIRS_OPTIONS:check(opts, 2)
  local ds = build_pairs(list, o, fname, function(i) return "pair " .. i end, 3)
  return ds
end

-- "a/b/data.tsv" -> "data"
local function stem(path)
  return (path:match("([^/]*)$"):gsub("%.[^%.]*$", ""))
end

-- one line of a TSV file -> pair (src, tgt[, align as integers])
local function tsv_pair(line, fail)
  local f = {}
  for field in (line .. "\t"):gmatch("(.-)\t") do f[#f + 1] = field end
  if #f < 2 or #f > 3 then
    fail("expected src<TAB>tgt or src<TAB>tgt<TAB>alignment, got %d field%s", #f,
         #f == 1 and "" or "s")
  end
  local pair = {src = f[1], tgt = f[2]}
  if f[3] then
    pair.align = {}
    for w in f[3]:gmatch("%S+") do
      local v = math.tointeger(tonumber(w))
      if not v then fail("the alignment column must hold integers, got '%s'", w) end
      pair.align[#pair.align + 1] = v
    end
  end
  return pair
end

-- one line of a JSON-lines file -> pair
local function jsonl_pair(line, fail)
  local ok, v = pcall(util.json_decode, line)
  if not ok then fail("not JSON: %s", (check.strip(v):gsub("^util%.json_decode: ", ""))) end
  if type(v) ~= "table" or v[1] ~= nil then
    fail("expected an object {\"src\": ..., \"tgt\": ..., \"align\": [...]}")
  end
  if v.src == nil or v.tgt == nil then fail("the object needs \"src\" and \"tgt\"") end
  local al = v.align
  if type(al) ~= "table" then al = nil end       -- absent or null: no alignment
  return {src = v.src, tgt = v.tgt, align = al}
end

--- seq2seq.from_file(path, {format=, tokens="chars", src_vocab=, tgt_vocab=, shared_vocab=false,
---   min_count=1, name=the file's stem}) -> dataset: seq2seq.from_pairs over a file's pairs
-- format "tsv": one pair a line, src<TAB>tgt, and optionally <TAB> the alignment as
-- whitespace-separated source positions; "jsonl": one object a line, {"src": ..., "tgt": ...,
-- "align": [...]} (src and tgt strings or lists of tokens; other keys are ignored).  Blank
-- lines are skipped; a bad line is an error naming the file and the line.
function M.from_file(path, opts)
  local fname = "seq2seq.from_file"
  if type(path) ~= "string" then check.fail(2, "%s: path must be a string, got %s", fname, type(path)) end
  local o = FILE_OPTIONS:check(opts, 2)
  if opts == nil or opts.name == nil then o.name = stem(path) end
  local ok, text = pcall(util.read_text, path)
  if not ok then
    check.fail(2, "%s: %s", fname, (check.strip(text):gsub("^util%.read_text: ", "")))
  end
  local fmt = o.format
  if not fmt then
    local ext = path:match("%.([%w]+)$")
    ext = ext and ext:lower()
    if ext == "tsv" or ext == "txt" or ext == "tab" then fmt = "tsv"
    elseif ext == "jsonl" or ext == "json" or ext == "ndjson" then fmt = "jsonl"
    else fmt = text:match("^%s*{") and "jsonl" or "tsv" end
  end
  local pairs_, lines, n = {}, {}, 0
  for line in (text .. "\n"):gmatch("(.-)\n") do
    n = n + 1
    line = line:gsub("\r$", "")
    if line:match("%S") then
      local function fail(fmt_, ...)
        check.fail(4, "%s: %s:%d: " .. fmt_, fname, path, n, ...)
      end
      pairs_[#pairs_ + 1] = (fmt == "tsv" and tsv_pair or jsonl_pair)(line, fail)
      lines[#pairs_] = n
    end
  end
  if #pairs_ == 0 then check.fail(2, "%s: %s holds no pairs", fname, path) end
  o.format = nil
  local ds = build_pairs(pairs_, o, fname,
                        function(i) return string.format("%s:%d", path, lines[i]) end, 3)
  return ds
end

--- tasks.make(name, opts) -> tasks[name](opts) for name in reversal, sorting, dates.
function M.make(name, opts)
  local f = ({reversal = M.reversal, sorting = M.sorting, dates = M.dates})[name]
  if not f then error("seq2seq: unknown task '" .. tostring(name) .. "'", 2) end
  return f(opts)
end

return M
