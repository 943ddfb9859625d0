--- datasets/seq2seq_tasks.lua -- small sequence-to-sequence tasks made from a seed, for
-- attention experiments that train in minutes on a CPU:
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
local Rng = require "glimpse.data.rng"
local Vocab = require "glimpse.data.vocab"
local batches = require "glimpse.data.batches"

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
---   tgt_lengths {B} (m + 1); src_text, tgt_text (lists of strings); indices.
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
  return batch
end

--- ds:decode_src(ids) / ds:decode_tgt(ids) -> string (ids: table or 1-D tensor; stops at <end>).
function Seq2Seq:decode_src(ids) return table.concat(self.src_vocab:decode(ids)) end
function Seq2Seq:decode_tgt(ids) return table.concat(self.tgt_vocab:decode(ids)) end

--- ds:split(k) -> two datasets: the first k examples and the rest (same vocabularies).
function Seq2Seq:split(k)
  local function part(a, b)
    local sub = {}
    for key, v in pairs(self) do sub[key] = v end
    sub.src = table.move(self.src, a, b, 1, {})
    sub.tgt = table.move(self.tgt, a, b, 1, {})
    sub.src_ids = table.move(self.src_ids, a, b, 1, {})
    sub.tgt_ids = table.move(self.tgt_ids, a, b, 1, {})
    sub.lengths = table.move(self.lengths, a, b, 1, {})
    if self.dates then sub.dates = table.move(self.dates, a, b, 1, {}) end
    if self.formats then sub.formats = table.move(self.formats, a, b, 1, {}) end
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

--- tasks.make(name, opts) -> tasks[name](opts) for name in reversal, sorting, dates.
function M.make(name, opts)
  local f = ({reversal = M.reversal, sorting = M.sorting, dates = M.dates})[name]
  if not f then error("seq2seq: unknown task '" .. tostring(name) .. "'", 2) end
  return f(opts)
end

return M
