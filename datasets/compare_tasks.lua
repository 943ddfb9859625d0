--- datasets/compare_tasks.lua (glimpse.data.compare) -- sequence tasks that separate
-- attention mechanisms: each trains on short sources, is tested at fixed longer lengths, and
-- every example knows its true alignment (the source position each target token comes from).
-- Why the tasks look as they do: docs/api/data.md.
--
--   reversal  "48213"                          -> "31284"        anti-diagonal alignment
--   sorting   "qdbkd"                          -> "bddkq"        a permutation (stable)
--   dates     "kq7 w 3 mar 1998 x5z"           -> "1998-03-03"   monotonic, gaps, in noise
--   lookup    "a3k7c1|ck"  (keys, values, |, queries) -> "17"    non-monotonic, many-to-one
-- and, outside the default grid (compare.MORE_TASKS), selectable by name:
--   translit  "quxhhea"                        -> "kwuksea"      monotonic, insertions, deletions
--   chain     "abcdbc"  (pairs of a chain)     -> "bcd"          one content lookup per step
-- Tasks of one's own join them by name through compare.register (glimpse.compare's task
-- files: docs/api/compare.md#your-own-task).
--
--   local task = glimpse.data.compare.task("lookup")        -- or compare.lookup{...}
--   local train = task:train_set(10000, 1)                   -- lengths 5..20 (dates 10..20)
--   local tests = task:test_sets({10, 20, 30, 40, 50}, 500, 1)   -- tests[30]: length 30
--   local b = train:collate({1, 2, 3})   -- seq2seq_tasks' batch plus b.align (B,T)
-- The datasets are seq2seq_tasks' class with one more field, ds.align[i]; a task's
-- vocabularies cover its whole alphabet, so its training and test sets share them.

-- True alignment conventions (ds.align[i][t], batch.align[b][t]):
--   reversal t -> L + 1 - t;  sorting: the source position of the symbol placed t-th by a
--   stable sort (the k-th equal symbol comes from the k-th occurrence);  lookup: the position
--   of the queried key's value;  dates: year digits -> their source digits, day digits -> the
--   day's digits; the month's two digits, the day's leading "0" when the source writes one
--   digit, and the two "-" have no single source position: 0.  translit: the source letter
--   each target letter is written for;  chain: the position of the value of the pair whose
--   key is the previous output.  <end> and padding: 0.
local Rng = require "glimpse.data.rng"
local Vocab = require "glimpse.data.vocab"
local batches = require "glimpse.data.batches"
local check = require "glimpse.check"
local seq2seq = require("glimpse").data.seq2seq

local M = {}

M.TASKS = {"reversal", "sorting", "dates", "lookup"}
M.TEST_LENGTHS = {10, 20, 30, 40, 50}
--- letters that spell no month or weekday name: the dates task's noise
M.NOISE_LETTERS = "kqwxz"
M.KEYS = "abcdefghijklmnopqrstuvwxyz"
M.SEPARATOR = "|"
--- the dates formats short enough for the training lengths (at most 19 characters)
M.DATE_FORMATS = {"month_ordinal", "day_month", "short_comma", "month_comma", "day_short"}
M.DATE_MIN_LEN = 10          -- "3 mar 1998", the shortest date

-- ---------------------------------------------------------------------------------------
-- the dataset: seq2seq_tasks' class with the alignment

local Seq2Seq = seq2seq.Seq2Seq
local Set = setmetatable({}, {__index = Seq2Seq})
Set.__index = Set
M.Set = Set

-- ds:collate(indices): Seq2Seq's, which adds align (B,T) aligned with tgt_out (1-based
-- source positions; 0: no single source, <end>, padding) when the set has alignments

--- ds:split(k) -> two datasets (the first k examples and the rest), alignments included.
function Set:split(k)
  local a, b = Seq2Seq.split(self, k)
  return setmetatable(a, Set), setmetatable(b, Set)
end

-- ---------------------------------------------------------------------------------------
-- the task object

local Task = {}
Task.__index = Task
M.Task = Task

local function check_count(v, what, name, level)
  if math.type(v) ~= "integer" or v < 0 then
    error(string.format("%s: %s must be a non-negative integer, got %s", name, what,
                        tostring(v)), level + 1)
  end
end

--- task:make(n, min_len, max_len, seed, stream) -> dataset of n examples whose source lengths
--- are drawn uniformly from min_len..max_len, from the generator (seed, stream).
function Task:make(n, min_len, max_len, seed, stream)
  local name = "compare." .. self.name
  check_count(n, "n", name, 2)
  if math.type(min_len) ~= "integer" or math.type(max_len) ~= "integer" or max_len < min_len
     or min_len < self.min_len_allowed or max_len > self.max_len_allowed then
    error(string.format("%s: source lengths %s..%s outside %d..%d", name, tostring(min_len),
                        tostring(max_len), self.min_len_allowed, self.max_len_allowed), 2)
  end
  if math.type(seed) ~= "integer" then
    error(name .. ": seed must be an integer, got " .. tostring(seed), 2)
  end
  local rng = Rng.new(seed, stream or (name .. ".make"))
  local src, tgt, align = {}, {}, {}
  for i = 1, n do
    src[i], tgt[i], align[i] = self.generate(rng, rng:int(min_len, max_len), self.opts)
  end
  local ds = seq2seq.dataset(self.name, src, tgt, self.src_vocab, self.tgt_vocab,
                             {align = align})
  return setmetatable(ds, Set)
end

--- task:train_set(n, seed) -> n examples with source lengths train_lengths[1]..[2] (5..20).
function Task:train_set(n, seed)
  return self:make(n, self.train_lengths[1], self.train_lengths[2], seed or 1,
                   "compare." .. self.name .. ".train")
end

--- task:test_set(L, n, seed) -> n examples whose sources all have length L (a stream of its
--- own per length, unrelated to the training stream of the same seed).
function Task:test_set(L, n, seed)
  return self:make(n, L, L, seed or 1, "compare." .. self.name .. ".test." .. tostring(L))
end

--- task:test_sets(lengths, n, seed) -> {[L] = dataset} for each L of lengths
--- (default M.TEST_LENGTHS = {10, 20, 30, 40, 50}).
function Task:test_sets(lengths, n, seed)
  local out = {}
  for _, L in ipairs(lengths or M.TEST_LENGTHS) do out[L] = self:test_set(L, n, seed) end
  return out
end

local function new_task(name, generate, o, src_chars, tgt_chars)
  local v_src = Vocab.chars(src_chars)
  local v_tgt = tgt_chars == src_chars and v_src or Vocab.chars(tgt_chars)
  local min_len, max_len = o.min_len, o.max_len
  if math.type(min_len) ~= "integer" or math.type(max_len) ~= "integer" or max_len < min_len
     or min_len < o.min_len_allowed or max_len > o.max_len_allowed then
    error(string.format("compare.%s: training lengths %s..%s outside %d..%d", name,
                        tostring(min_len), tostring(max_len), o.min_len_allowed,
                        o.max_len_allowed), 3)
  end
  return setmetatable({name = name, generate = generate, opts = o, src_vocab = v_src,
                       tgt_vocab = v_tgt, train_lengths = {min_len, max_len},
                       has_alignments = true, chars = true,
                       min_len_allowed = o.min_len_allowed,
                       max_len_allowed = o.max_len_allowed}, Task)
end

local function symbols_opt(o, default, name)
  local s = o.symbols or default
  if type(s) ~= "string" or #s < 2 then
    error("compare." .. name .. ": symbols must be a string of at least 2 characters", 3)
  end
  for i = 1, #s do
    if s:find(s:sub(i, i), i + 1, true) then
      error("compare." .. name .. ": symbol '" .. s:sub(i, i) .. "' appears twice", 3)
    end
  end
  return s
end

local function draw(rng, s)
  local k = rng:int(1, #s)
  return s:sub(k, k)
end

-- ---------------------------------------------------------------------------------------
-- reversal and sorting

local function gen_reversal(rng, L, o)
  local c, r, a = {}, {}, {}
  for t = 1, L do c[t] = draw(rng, o.symbols) end
  for t = 1, L do r[t], a[t] = c[L + 1 - t], L + 1 - t end
  return table.concat(c), table.concat(r), a
end

--- compare.reversal{min_len=5, max_len=20, symbols="0123456789"} -> task
function M.reversal(opts)
  opts = opts or {}
  local o = {symbols = symbols_opt(opts, "0123456789", "reversal"),
             min_len = opts.min_len or 5, max_len = opts.max_len or 20,
             min_len_allowed = 1, max_len_allowed = math.maxinteger}
  return new_task("reversal", gen_reversal, o, o.symbols, o.symbols)
end

local function gen_sorting(rng, L, o)
  local c, order = {}, {}
  for t = 1, L do c[t], order[t] = draw(rng, o.symbols), t end
  table.sort(order, function(i, j)                       -- stable: ties by position
    if c[i] ~= c[j] then return o.rank[c[i]] < o.rank[c[j]] end
    return i < j
  end)
  local s = {}
  for t = 1, L do s[t] = c[order[t]] end
  return table.concat(c), table.concat(s), order
end

--- compare.sorting{min_len=5, max_len=20, symbols="abcdefghijklmnopqrst"} -> task; the
--- target is the source's symbols in the order they are listed in `symbols`.
function M.sorting(opts)
  opts = opts or {}
  local o = {symbols = symbols_opt(opts, "abcdefghijklmnopqrst", "sorting"),
             min_len = opts.min_len or 5, max_len = opts.max_len or 20,
             min_len_allowed = 1, max_len_allowed = math.maxinteger, rank = {}}
  for i = 1, #o.symbols do o.rank[o.symbols:sub(i, i)] = i end
  return new_task("sorting", gen_sorting, o, o.symbols, o.symbols)
end

-- ---------------------------------------------------------------------------------------
-- dates in noise

-- noise of exactly c >= 1 characters: groups separated by single spaces, each starting and
-- ending with a noise letter (digits only inside), so no digit run stands alone
local function noise(rng, c)
  local parts, left = {}, c
  while left > 0 do
    local g = rng:int(1, math.min(left, 5))
    if left - g == 1 then g = left end             -- a lone space cannot end the noise
    local grp = {draw(rng, M.NOISE_LETTERS)}
    for k = 2, g - 1 do
      grp[k] = rng:int(1, 2) == 1 and draw(rng, M.NOISE_LETTERS) or draw(rng, "0123456789")
    end
    if g > 1 then grp[g] = draw(rng, M.NOISE_LETTERS) end
    parts[#parts + 1] = table.concat(grp)
    left = left - g - (left - g > 0 and 1 or 0)
  end
  return table.concat(parts, " ")
end

-- the first and the last digit runs of a date text: the day and the year
local function digit_runs(text)
  local runs = {}
  for s, e in text:gmatch("()%d+()") do runs[#runs + 1] = {s, e - 1} end
  return runs[1], runs[#runs]
end

local function gen_dates(rng, L, o)
  local text, y, m, d
  repeat
    y = rng:int(o.min_year, o.max_year)
    m = rng:int(1, 12)
    d = rng:int(1, seq2seq.days_in_month(y, m))
    local f = o.formats[rng:int(1, #o.formats)]
    text = seq2seq.DATE_FORMATS[f](y, m, d)
  until #text <= L and L - #text ~= 1
  local N = L - #text                               -- noise characters, with separators
  local a = 0
  if N >= 2 then
    a = rng:int(0, N)
    if a == 1 then a = 0 end
    if N - a == 1 then a = N end
  end
  local pre = a > 0 and noise(rng, a - 1) .. " " or ""
  local post = N - a > 0 and " " .. noise(rng, N - a - 1) or ""
  local src = pre .. text .. post
  local day, year = digit_runs(text)
  local off = #pre
  local align = {}
  for k = 0, 3 do align[k + 1] = off + year[1] + k end
  align[5], align[6], align[7], align[8] = 0, 0, 0, 0            -- "-MM-"
  if day[2] > day[1] then
    align[9], align[10] = off + day[1], off + day[2]
  else
    align[9], align[10] = 0, off + day[1]                         -- the leading "0"
  end
  return src, seq2seq.iso_date(y, m, d), align
end

--- compare.dates{min_len=10, max_len=20, formats=M.DATE_FORMATS, min_year=1950,
--- max_year=2049} -> task; sources are a date (seq2seq_tasks' surface forms) inside noise,
--- exactly L characters long (L >= 10); targets "YYYY-MM-DD".  Training lengths start at 10
--- rather than 5 because the shortest date has 10 characters; short lengths hold only the
--- short forms ("3 mar 1998"), every form fits from 19 on.
function M.dates(opts)
  opts = opts or {}
  local o = {formats = opts.formats or M.DATE_FORMATS, min_year = opts.min_year or 1950,
             max_year = opts.max_year or 2049, min_len = opts.min_len or 10,
             max_len = opts.max_len or 20, min_len_allowed = M.DATE_MIN_LEN,
             max_len_allowed = math.maxinteger}
  if type(o.formats) ~= "table" or #o.formats == 0 then
    error("compare.dates: formats must be a non-empty list of names", 2)
  end
  local short = false
  for _, f in ipairs(o.formats) do
    if not seq2seq.DATE_FORMATS[f] then
      error("compare.dates: unknown format '" .. tostring(f) .. "'", 2)
    end
    short = short or f == "day_short" or f == "short_comma" or f == "day_month"
  end
  if not short then
    error("compare.dates: formats need one of day_short, short_comma, day_month (sources of " ..
          "10 characters)", 2)
  end
  if math.type(o.min_year) ~= "integer" or o.min_year < 1000 or o.max_year > 9999
     or o.max_year < o.min_year then
    error("compare.dates: years must lie in 1000..9999", 2)
  end
  return new_task("dates", gen_dates, o,
                  seq2seq.DATE_SRC_CHARS, seq2seq.DATE_TGT_CHARS)
end

-- ---------------------------------------------------------------------------------------
-- keyed lookup

--- compare.lookup_shape(L) -> n pairs, m queries with 2n + 1 + m = L (about a third of the
--- source is queries)
function M.lookup_shape(L)
  local m = math.max(1, (L - 1) // 3)
  local n = (L - 1 - m) // 2
  return n, L - 1 - 2 * n
end

local function gen_lookup(rng, L, o)
  local n, m = M.lookup_shape(L)
  local keys = rng:sample(#o.keys, n)                -- n distinct keys
  local src, val_pos, value = {}, {}, {}
  for i = 1, n do
    local k = o.keys:sub(keys[i], keys[i])
    value[k] = draw(rng, o.values)
    src[2 * i - 1], src[2 * i] = k, value[k]
    val_pos[k] = 2 * i
  end
  src[2 * n + 1] = M.SEPARATOR
  local tgt, align = {}, {}
  for j = 1, m do
    local i = keys[rng:int(1, n)]
    local k = o.keys:sub(i, i)
    src[2 * n + 1 + j] = k
    tgt[j], align[j] = value[k], val_pos[k]
  end
  return table.concat(src), table.concat(tgt), align
end

--- compare.lookup{min_len=5, max_len=20, keys="a".."z", values="0123456789"} -> task;
--- source "k1 v1 k2 v2 ... kn vn | q1 ... qm" (no spaces; keys distinct, queries drawn from
--- the keys with repeats), target the values of the queried keys.  L >= 4; the longest
--- source has about 3 * #keys characters (79 with 26 keys).
function M.lookup(opts)
  opts = opts or {}
  local o = {keys = symbols_opt({symbols = opts.keys}, M.KEYS, "lookup"),
             values = symbols_opt({symbols = opts.values}, "0123456789", "lookup"),
             min_len = opts.min_len or 5, max_len = opts.max_len or 20, min_len_allowed = 4}
  for i = 1, #o.values do
    if o.keys:find(o.values:sub(i, i), 1, true) or o.values:sub(i, i) == M.SEPARATOR then
      error("compare.lookup: keys, values and '" .. M.SEPARATOR .. "' must not share symbols", 2)
    end
  end
  local L = 4
  while M.lookup_shape(L + 1) <= #o.keys do L = L + 1 end
  o.max_len_allowed = L
  return new_task("lookup", gen_lookup, o, o.keys .. o.values .. M.SEPARATOR, o.values)
end

-- ---------------------------------------------------------------------------------------
-- transliteration-like copying: monotonic, with insertions and deletions

--- compare.TRANSLIT_RULES: what translit writes for a source letter (every other letter is
--- copied); a letter equal to the one before it is dropped (doubled letters collapse)
M.TRANSLIT_RULES = {h = "", c = "k", q = "kw", x = "ks", y = "i"}

local function gen_translit(rng, L, o)
  local c, out, a = {}, {}, {}
  for t = 1, L do c[t] = draw(rng, o.symbols) end
  for t = 1, L do
    local w = c[t] == c[t - 1] and "" or (o.rules[c[t]] or c[t])
    for k = 1, #w do out[#out + 1], a[#a + 1] = w:sub(k, k), t end
  end
  return table.concat(c), table.concat(out), a
end

--- compare.translit{min_len=5, max_len=20, symbols="abcdehiklmnopqrstuxy"} -> task; the
--- source's letters written out by compare.TRANSLIT_RULES ("h" silent, "c" -> "k", "q" ->
--- "kw", "x" -> "ks", "y" -> "i", doubled letters once): "quxhhea" -> "kwuksea".  The
--- alignment is monotonic, with insertions (two target letters from one source letter)
--- and deletions (source letters with no target letter): the task monotonic attention is
--- built for.
function M.translit(opts)
  opts = opts or {}
  local o = {symbols = symbols_opt(opts, "abcdehiklmnopqrstuxy", "translit"),
             min_len = opts.min_len or 5, max_len = opts.max_len or 20, min_len_allowed = 1,
             max_len_allowed = math.maxinteger, rules = M.TRANSLIT_RULES}
  local seen, tgt = {}, {}
  for i = 1, #o.symbols do
    local ch = o.symbols:sub(i, i)
    local w = o.rules[ch] or ch
    for k = 1, #w do
      local x = w:sub(k, k)
      if not seen[x] then seen[x], tgt[#tgt + 1] = true, x end
    end
  end
  table.sort(tgt)
  return new_task("translit", gen_translit, o, o.symbols, table.concat(tgt))
end

-- ---------------------------------------------------------------------------------------
-- following a chain: content addressing from the last output

local function gen_chain(rng, L, o)
  local m = L // 2
  local pick = rng:sample(#o.symbols, m + 1)           -- the chain c0 -> c1 -> ... -> cm
  local c = {}
  for i = 1, m + 1 do c[i] = o.symbols:sub(pick[i], pick[i]) end
  local order = {1}                                     -- the pair c0 c1 comes first
  local rest = {}
  for i = 2, m do rest[#rest + 1] = i end
  rng:shuffle(rest)
  table.move(rest, 1, #rest, 2, order)
  local src, where = {}, {}
  for k, i in ipairs(order) do
    src[2 * k - 1], src[2 * k] = c[i], c[i + 1]
    where[i] = 2 * k                                    -- pair i's value
  end
  if L % 2 == 1 then src[L] = M.FILLER end
  local tgt, align = {}, {}
  for i = 1, m do tgt[i], align[i] = c[i + 1], where[i] end
  return table.concat(src), table.concat(tgt), align
end

M.FILLER = "."

--- compare.chain{min_len=5, max_len=20, symbols="a".."z".."0".."9"} -> task; the source is a
--- chain of distinct symbols c0 -> c1 -> ... -> cm written as pairs "c(i-1) c(i)", the pair
--- of c0 first and the others shuffled (a "." ends an odd length); the target follows the
--- chain: c1 c2 ... cm.  "ab" "cd" "bc" -> "bcd".  Each output is the value of the pair
--- whose key is the previous output: one content lookup per step, at a place that jumps
--- around the source.  L >= 4; at most 2 * (#symbols - 1) + 1 (71).
function M.chain(opts)
  opts = opts or {}
  local o = {symbols = symbols_opt(opts, M.KEYS .. "0123456789", "chain"),
             min_len = opts.min_len or 5, max_len = opts.max_len or 20, min_len_allowed = 4}
  if o.symbols:find(M.FILLER, 1, true) then
    error("compare.chain: symbols must not hold the filler '" .. M.FILLER .. "'", 2)
  end
  o.max_len_allowed = 2 * (#o.symbols - 1) + 1
  return new_task("chain", gen_chain, o, o.symbols .. M.FILLER, o.symbols)
end

-- ---------------------------------------------------------------------------------------
-- the registry: the shipped tasks by name, and tasks of one's own (glimpse.compare's
-- define_task turns a task file's table into a task and registers it here)

local SHIPPED = {reversal = M.reversal, sorting = M.sorting, dates = M.dates, lookup = M.lookup,
                 translit = M.translit, chain = M.chain}
--- the shipped tasks outside the default grid (compare.TASKS): selectable by name
M.MORE_TASKS = {"translit", "chain"}

local REGISTERED, REGISTERED_ORDER = {}, {}

--- task:can_make(L) -> whether the task makes sources of length L (test sets, the heatmap)
function Task:can_make(L)
  return L >= self.min_len_allowed and L <= self.max_len_allowed
end

--- task:lengths_text() -> the source lengths the task makes, in words (for errors)
function Task:lengths_text()
  if self.max_len_allowed == math.maxinteger then
    return string.format("of lengths of at least %d", self.min_len_allowed)
  end
  return string.format("of lengths %d..%d", self.min_len_allowed, self.max_len_allowed)
end

--- compare.register(task) -> task: a task of one's own made reachable by name
--- (compare.task(name), the compare tool's grids).  task: an object with name, train_lengths,
--- src_vocab, tgt_vocab and the methods of the shipped tasks (make, train_set, test_set,
--- test_sets, can_make, lengths_text), as glimpse.compare.define_task makes it from a table.
--- Registering a name again replaces it (a task file loaded twice); a shipped name is refused.
function M.register(t)
  if type(t) ~= "table" or type(t.name) ~= "string" or type(t.train_set) ~= "function" then
    error("compare.register: expected a task (glimpse.compare.define_task makes one from a " ..
          "table), got " .. type(t), 2)
  end
  if SHIPPED[t.name] then
    error("compare.register: '" .. t.name .. "' is a shipped task's name; choose another", 2)
  end
  if not REGISTERED[t.name] then REGISTERED_ORDER[#REGISTERED_ORDER + 1] = t.name end
  REGISTERED[t.name] = t
  return t
end

--- compare.registered() -> the names of the registered tasks, in the order they came
function M.registered()
  return table.move(REGISTERED_ORDER, 1, #REGISTERED_ORDER, 1, {})
end

--- compare.shipped() -> the names of the shipped tasks: compare.TASKS then compare.MORE_TASKS
function M.shipped()
  local out = table.move(M.TASKS, 1, #M.TASKS, 1, {})
  return table.move(M.MORE_TASKS, 1, #M.MORE_TASKS, #out + 1, out)
end

--- compare.task(name, opts) -> a task by name: a shipped one (compare[name](opts): TASKS,
--- MORE_TASKS) or a registered one (compare.register; opts must be nil).  An unknown name is an error that
--- lists the shipped and the registered tasks and suggests the nearest.
function M.task(name, opts)
  local f = SHIPPED[name]
  if f then return f(opts) end
  local t = REGISTERED[name]
  if t then
    if opts ~= nil then
      error("compare.task: '" .. name .. "' is a task of one's own: it takes no options", 2)
    end
    return t
  end
  local all = M.shipped()
  table.move(REGISTERED_ORDER, 1, #REGISTERED_ORDER, #all + 1, all)
  error(string.format("compare.task: unknown task %s%s (shipped: %s; loaded: %s)",
                      check.value(name), type(name) == "string" and check.did_you_mean(name, all)
                      or "", table.concat(M.shipped(), ", "),
                      #REGISTERED_ORDER > 0 and table.concat(REGISTERED_ORDER, ", ")
                      or "none (--task-file FILE loads one)"), 2)
end

--- compare.is_shipped(name) -> whether name is a shipped task's
function M.is_shipped(name) return SHIPPED[name] ~= nil end

return M

