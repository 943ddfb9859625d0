--- glimpse.compare's tasks of one's own (part of glimpse.compare; compare/init.lua publishes
-- define_task, register_task, load_task_file): the task contract, the task object made from
-- a table that keeps it (a generator or a list of pairs, the alphabets, the training and
-- test lengths), and task files -- Lua files returning such tables (and registering scores)
-- that every worker process and MPI rank loads again, so that --jobs, resume and mpirun see
-- the same tasks.  The contract and an example file: docs/api/compare.md#your-own-task.
--
--   local task = compare.define_task{name = "xcopy", alphabet = "abc", generate = gen,
--                                    train_lengths = {5, 20}, test_lengths = {10, 30}}
--   local info = compare.load_task_file("my_task.lua")   -- {path=, digest=, tasks=, scores=}
local glimpse = require "glimpse"
local check = require "glimpse.check"
local util = require "glimpse.util"
local att = require "glimpse.attention"
local Rng = require "glimpse.data.rng"
local Vocab = require "glimpse.data.vocab"
local shipped = glimpse.data.compare
local seq2seq = glimpse.data.seq2seq

local T = {}

--- the fields of a task table (compare.define_task)
T.SPEC_FIELDS = {"name", "generate", "pairs", "test_pairs", "alphabet", "src_alphabet",
                 "tgt_alphabet", "train_lengths", "test_lengths", "lengths", "help"}

local function spec_fail(name, level, fmt, ...)
  error(string.format("compare.define_task: task %s: " .. fmt, name, ...), level + 1)
end

-- ---------------------------------------------------------------------------------------
-- examples, checked

-- a side of an example -> token list (a string: its characters, or its words when the
-- task's alphabet is a list of tokens; a list: its tokens), or nil
local function tokens_of(x, chars)
  if type(x) == "string" then
    local t = {}
    if chars then
      if not utf8.len(x) then return nil end
      for ch in x:gmatch(utf8.charpattern) do t[#t + 1] = ch end
    else
      for w in x:gmatch("%S+") do t[#t + 1] = w end
    end
    return t
  end
  if type(x) ~= "table" then return nil end
  for i = 1, #x do if type(x[i]) ~= "string" or x[i] == "" then return nil end end
  return table.move(x, 1, #x, 1, {})
end

-- an alphabet (a string of characters, or a list of tokens) -> Vocab, and whether it is one
-- of characters
local function alphabet_vocab(v, what, name, level)
  if type(v) == "string" then
    local list, seen = {}, {}
    if not utf8.len(v) then spec_fail(name, level + 1, "%s is not valid UTF-8", what) end
    for ch in v:gmatch(utf8.charpattern) do
      if not seen[ch] then seen[ch], list[#list + 1] = true, ch end
    end
    if #list == 0 then spec_fail(name, level + 1, "%s is empty", what) end
    return Vocab.new(list), true
  end
  if type(v) ~= "table" or #v == 0 then
    spec_fail(name, level + 1, "%s must be a string of characters or a list of tokens, got %s",
              what, check.value(v))
  end
  for _, t in ipairs(v) do
    if type(t) ~= "string" or t == "" or t:find("%s") then
      spec_fail(name, level + 1, "%s: tokens must be non-empty strings without spaces, got %s",
                what, check.value(t))
    end
  end
  local ok, vocab = pcall(Vocab.new, v)
  if not ok then
    spec_fail(name, level + 1, "%s: %s", what, (tostring(vocab):gsub("^.-vocab%.new: ", "")))
  end
  return vocab, false
end

-- one example as the task's tokens, checked: src, tgt token lists and the alignment (or
-- nil).  Errors name the task and where the example comes from ("generate(rng, 12)",
-- "pairs[3]"); L: the source length asked for
local function check_example(task, src, tgt, al, from, L)
  local name = task.name
  local s = tokens_of(src, task.chars)
  if not s then
    error(string.format("compare.%s: %s: the source must be a string or a list of tokens, " ..
                        "got %s", name, from, check.value(src)), 0)
  end
  local t = tokens_of(tgt, task.chars)
  if not t then
    error(string.format("compare.%s: %s: the target must be a string or a list of tokens, " ..
                        "got %s", name, from, check.value(tgt)), 0)
  end
  if L and #s ~= L then
    error(string.format("compare.%s: %s returned a source of %d tokens: a source must have " ..
                        "exactly the length asked for", name, from, #s), 0)
  end
  for _, side in ipairs({{"source", s, task.src_vocab}, {"target", t, task.tgt_vocab}}) do
    for _, w in ipairs(side[2]) do
      local id = side[3].stoi[w]
      if not id or id <= #Vocab.SPECIALS then
        error(string.format("compare.%s: %s: the %s has %s, which is not in the task's " ..
                            "alphabet", name, from, side[1], check.value(w)), 0)
      end
    end
  end
  if (al ~= nil) ~= task.has_alignments then
    error(string.format("compare.%s: %s %s an alignment, unlike the task's first example " ..
                        "(give every example an alignment, or none)", name, from,
                        al ~= nil and "has" or "lacks"), 0)
  end
  local a
  if al ~= nil then
    if type(al) ~= "table" or #al ~= #t then
      error(string.format("compare.%s: %s: the alignment must list one source position per " ..
                          "target token (%d), got %s", name, from, #t,
                          type(al) == "table" and #al .. " entries" or check.value(al)), 0)
    end
    a = {}
    for j = 1, #t do
      local v = math.tointeger(al[j])
      if not v or v < 0 or v > #s then
        error(string.format("compare.%s: %s: alignment entry %d must be a source position " ..
                            "in 0..%d (0: none), got %s", name, from, j, #s,
                            check.value(al[j])), 0)
      end
      a[j] = v
    end
  end
  return s, t, a
end

-- ---------------------------------------------------------------------------------------
-- the task object: the shipped tasks' class (data.compare.Task) with its own make

local OwnTask = setmetatable({}, {__index = shipped.Task})
OwnTask.__index = OwnTask
T.OwnTask = OwnTask

-- the dataset of examples given as token lists: the shipped tasks' class, with
-- src_tokens/tgt_tokens beside the texts (as seq2seq.from_pairs)
local function own_dataset(task, s_tok, t_tok, align)
  local sep = task.chars and "" or " "
  local src, tgt = {}, {}
  for i = 1, #s_tok do
    src[i], tgt[i] = table.concat(s_tok[i], sep), table.concat(t_tok[i], sep)
  end
  local ds = seq2seq.dataset(task.name, s_tok, t_tok, task.src_vocab, task.tgt_vocab,
                             {align = task.has_alignments and align or nil, separator = sep})
  ds.src_tokens, ds.tgt_tokens, ds.src, ds.tgt = ds.src, ds.tgt, src, tgt
  return setmetatable(ds, shipped.Set)
end

--- task:make(n, min_len, max_len, seed, stream) -> n examples with source lengths in
--- min_len..max_len: from the generator (each checked), or drawn from the pairs of those
--- lengths (with replacement; a test set takes distinct pairs, at most n)
function OwnTask:make(n, min_len, max_len, seed, stream, testing)
  local name = "compare." .. self.name
  if math.type(n) ~= "integer" or n < 0 then
    error(string.format("%s: n must be a non-negative integer, got %s", name, tostring(n)), 2)
  end
  if math.type(min_len) ~= "integer" or math.type(max_len) ~= "integer" or max_len < min_len
     or self.generate and not (self:can_make(min_len) and self:can_make(max_len)) then
    error(string.format("%s: source lengths %s..%s: the task makes sources %s", name,
                        tostring(min_len), tostring(max_len), self:lengths_text()), 2)
  end
  if math.type(seed) ~= "integer" then
    error(name .. ": seed must be an integer, got " .. tostring(seed), 2)
  end
  local rng = Rng.new(seed, stream or (name .. ".make"))
  local s_tok, t_tok, align = {}, {}, {}
  if self.generate then
    for i = 1, n do
      local L = rng:int(min_len, max_len)
      local src, tgt, al = self.generate(rng, L)
      s_tok[i], t_tok[i], align[i] = check_example(self, src, tgt, al,
                                                   string.format("generate(rng, %d)", L), L)
    end
  else
    local pool = {}
    for _, ex in ipairs(testing and self.test_pool or self.pool) do
      if #ex[1] >= min_len and #ex[1] <= max_len then pool[#pool + 1] = ex end
    end
    if #pool == 0 then
      error(string.format("%s: no pair has a source of length %d..%d (the task makes sources " ..
                          "%s)", name, min_len, max_len, self:lengths_text()), 2)
    end
    if testing then rng:shuffle(pool) end
    for i = 1, testing and math.min(n, #pool) or n do
      local ex = testing and pool[i] or pool[rng:int(1, #pool)]
      s_tok[i], t_tok[i], align[i] = ex[1], ex[2], ex[3]
    end
  end
  return own_dataset(self, s_tok, t_tok, align)
end

--- task:test_set(L, n, seed) -> n examples of source length L: the generator's, or a pairs
--- task's pairs of that length (from test_pairs when it has them), at most n
function OwnTask:test_set(L, n, seed)
  return self:make(n, L, L, seed or 1, "compare." .. self.name .. ".test." .. tostring(L), true)
end

--- task:can_make(L) -> whether the task makes test sources of length L
function OwnTask:can_make(L)
  if self.generate then return shipped.Task.can_make(self, L) end
  return self.test_counts[L] ~= nil
end

function OwnTask:lengths_text()
  if self.generate then return shipped.Task.lengths_text(self) end
  local ls = {}
  for L in pairs(self.test_counts) do ls[#ls + 1] = L end
  table.sort(ls)
  return "of the lengths in its " .. (self.has_test_pairs and "test_pairs" or "pairs") .. " (" ..
         table.concat(ls, ", ") .. ")"
end

-- ---------------------------------------------------------------------------------------
-- the contract

local function int_list(v, n)
  if type(v) ~= "table" or #v == 0 or (n and #v ~= n) then return nil end
  local out = {}
  for i = 1, #v do
    out[i] = math.tointeger(v[i])
    if not out[i] or out[i] < 1 then return nil end
  end
  for k in pairs(v) do
    if math.type(k) ~= "integer" or k < 1 or k > #v then return nil end
  end
  return out
end

-- a pair's parts: {src, tgt[, align]} or {src=, tgt=, align=}
local function pair_parts(pr)
  if pr.src ~= nil or pr.tgt ~= nil then return pr.src, pr.tgt, pr.align end
  return pr[1], pr[2], pr[3]
end

-- a pairs list -> {src tokens, tgt tokens, align} examples, checked
local function pair_examples(task, list, what, level)
  if type(list) ~= "table" or #list == 0 then
    spec_fail(task.shown, level + 1, "%s must be a non-empty list of {src, tgt[, align]} pairs",
              what)
  end
  local out = {}
  for i, pr in ipairs(list) do
    if type(pr) ~= "table" then
      spec_fail(task.shown, level + 1, "%s[%d] must be a pair {src, tgt[, align]}, got %s", what,
                i, check.value(pr))
    end
    local src, tgt, al = pair_parts(pr)
    if task.has_alignments == nil then task.has_alignments = al ~= nil end
    local ok, s, t, a = pcall(check_example, task, src, tgt, al, string.format("%s[%d]", what, i))
    if not ok then error("compare.define_task: " .. tostring(s), level + 1) end
    if #s == 0 then spec_fail(task.shown, level + 1, "%s[%d] has an empty source", what, i) end
    out[i] = {s, t, a}
  end
  return out
end

-- the tokens of one side of the pairs, in order of appearance
local function pairs_tokens(lists, side, chars)
  local seen, toks = {}, {}
  for _, list in ipairs(lists) do
    for _, pr in ipairs(type(list) == "table" and list or {}) do
      local parts = type(pr) == "table" and {pair_parts(pr)} or {}
      for _, w in ipairs(tokens_of(parts[side], chars) or {}) do
        if not seen[w] then seen[w], toks[#toks + 1] = true, w end
      end
    end
  end
  return toks
end

-- the alphabets of a task table -> task.src_vocab, task.tgt_vocab, task.chars
local function alphabets(task, spec, level)
  local shown = task.shown
  if spec.alphabet ~= nil and (spec.src_alphabet ~= nil or spec.tgt_alphabet ~= nil) then
    spec_fail(shown, level + 1, "give alphabet (both sides) or src_alphabet and tgt_alphabet, " ..
              "not both")
  end
  local src_a, tgt_a = spec.src_alphabet or spec.alphabet, spec.tgt_alphabet or spec.alphabet
  if (src_a == nil) ~= (tgt_a == nil) then
    spec_fail(shown, level + 1, "give src_alphabet and tgt_alphabet both, or alphabet")
  end
  if src_a == nil then
    if spec.generate then
      spec_fail(shown, level + 1, "a generated task needs its alphabet (alphabet = \"abc...\" " ..
                "or a list of tokens; or src_alphabet and tgt_alphabet)")
    end
    local first = type(spec.pairs[1]) == "table" and pair_parts(spec.pairs[1])
    task.chars = type(first) ~= "table"
    local lists = {spec.pairs, spec.test_pairs}
    task.src_vocab = Vocab.new(pairs_tokens(lists, 1, task.chars))
    task.tgt_vocab = Vocab.new(pairs_tokens(lists, 2, task.chars))
    return
  end
  local c1, c2
  task.src_vocab, c1 = alphabet_vocab(src_a, spec.alphabet and "alphabet" or "src_alphabet",
                                      shown, level + 1)
  if tgt_a == src_a then
    task.tgt_vocab, c2 = task.src_vocab, c1
  else
    task.tgt_vocab, c2 = alphabet_vocab(tgt_a, "tgt_alphabet", shown, level + 1)
  end
  if c1 ~= c2 then
    spec_fail(shown, level + 1, "the two alphabets must both be strings of characters or both " ..
              "lists of tokens")
  end
  task.chars = c1
end

-- the lengths of a task table -> task.train_lengths, test_lengths, min/max_len_allowed
local function lengths(task, spec, level)
  local shown = task.shown
  local tl = spec.train_lengths == nil and {5, 20} or int_list(spec.train_lengths, 2)
  if not tl or tl[2] < tl[1] then
    spec_fail(shown, level + 1, "train_lengths must be {min, max} with 1 <= min <= max, got %s",
              check.value(spec.train_lengths))
  end
  task.train_lengths = tl
  if spec.test_lengths ~= nil then
    task.test_lengths = int_list(spec.test_lengths)
    if not task.test_lengths then
      spec_fail(shown, level + 1, "test_lengths must be a non-empty list of positive integers, " ..
                "got %s", check.value(spec.test_lengths))
    end
  end
  task.min_len_allowed, task.max_len_allowed = 1, math.maxinteger
  if spec.lengths ~= nil then
    local r = type(spec.lengths) == "table" and #spec.lengths == 2 and
              {math.tointeger(spec.lengths[1]), spec.lengths[2] == math.huge and math.maxinteger
               or math.tointeger(spec.lengths[2])}
    if not spec.generate or not r or not r[1] or not r[2] or r[1] < 1 or r[2] < r[1] then
      spec_fail(shown, level + 1, "lengths must be {min, max}: the source lengths generate " ..
                "makes (1 <= min <= max; max may be math.huge), got %s", check.value(spec.lengths))
    end
    task.min_len_allowed, task.max_len_allowed = r[1], r[2]
    if tl[1] < r[1] or tl[2] > r[2] then
      spec_fail(shown, level + 1, "train_lengths %d..%d lie outside lengths %d..%s", tl[1], tl[2],
                r[1], r[2] == math.maxinteger and "inf" or tostring(r[2]))
    end
  end
end

--- compare.define_task(spec) -> task: a task of one's own from a table that keeps the task
--- contract (docs/api/compare.md#your-own-task):
---   name = "xcopy"                   letters, digits, _ and - (a letter first); not a shipped task
---   generate = function(rng, L) -> src, tgt[, align]   a source of exactly L tokens (a
---                                    string of characters, or a list of tokens), its target,
---                                    and optionally the alignment: for each target token the
---                                    1-based source position it comes from (0: none);
---                                    rng is a glimpse.data.Rng (rng:int(lo, hi), rng:random())
---   pairs = {{src, tgt[, align]}, ...}   instead of generate: fixed examples; test_pairs:
---                                    optional held-out ones for the test sets
---   alphabet = "abc..." or {"tok", ...}   the tokens of both sides (or src_alphabet and
---                                    tgt_alphabet); a pairs task may leave it out (built)
---   train_lengths = {5, 20}          the training sources' lengths, min and max
---   test_lengths = {10, 20, 30}      optional: where compare tests it (default: the settings')
---   lengths = {1, math.huge}         optional: the source lengths generate can make
---   help = "one line"                optional
--- The generator is tried once (at the shortest training length); every example is checked
--- as it is made: its length, its tokens (in the alphabet), its alignment.  The task has
--- alignments when its first example has one, and then every example must.
function T.define_task(spec)
  if type(spec) ~= "table" then
    check.fail(2, "compare.define_task: a task must be a table {name=, generate= or pairs=, " ..
               "alphabet=, train_lengths=, test_lengths=}, got %s", check.value(spec))
  end
  local name = spec.name
  if type(name) ~= "string" or not name:match("^%a[%w_%-]*$") then
    check.fail(2, "compare.define_task: name must be a string of letters, digits, _ and - " ..
               "(a letter first), got %s", check.value(name))
  end
  local shown = "'" .. name .. "'"
  for k in pairs(spec) do
    local known = false
    for _, f in ipairs(T.SPEC_FIELDS) do known = known or f == k end
    if not known then
      spec_fail(shown, 2, "unknown field %s%s (fields: %s)", check.value(k),
                type(k) == "string" and check.did_you_mean(k, T.SPEC_FIELDS) or "",
                table.concat(T.SPEC_FIELDS, ", "))
    end
  end
  if shipped.is_shipped(name) then
    spec_fail(shown, 2, "'%s' is a shipped task's name; choose another", name)
  end
  if (spec.generate == nil) == (spec.pairs == nil) then
    spec_fail(shown, 2, "give generate = function(rng, L) or pairs = {...}, one of them")
  end
  if spec.generate ~= nil and type(spec.generate) ~= "function" then
    spec_fail(shown, 2, "generate must be a function (rng, L) -> src, tgt[, align], got %s",
              check.value(spec.generate))
  end
  if spec.test_pairs ~= nil and spec.pairs == nil then
    spec_fail(shown, 2, "test_pairs goes with pairs")
  end
  if spec.help ~= nil and type(spec.help) ~= "string" then
    spec_fail(shown, 2, "help must be a string, got %s", check.value(spec.help))
  end
  local task = setmetatable({name = name, shown = shown, own = true, help = spec.help,
                             generate = spec.generate}, OwnTask)
  lengths(task, spec, 2)
  alphabets(task, spec, 2)
  if spec.generate then
    -- the trial: one example at the shortest training length decides has_alignments
    local L = task.train_lengths[1]
    local ok, src, tgt, al = pcall(spec.generate, Rng.new(1, "compare.define_task." .. name), L)
    if not ok then spec_fail(shown, 2, "generate(rng, %d) failed: %s", L, tostring(src)) end
    task.has_alignments = al ~= nil
    local ok2, err = pcall(check_example, task, src, tgt, al,
                           string.format("generate(rng, %d)", L), L)
    if not ok2 then check.fail(2, "compare.define_task: %s", tostring(err)) end
    return task
  end
  task.pool = pair_examples(task, spec.pairs, "pairs", 2)
  task.has_test_pairs = spec.test_pairs ~= nil
  task.test_pool = spec.test_pairs and pair_examples(task, spec.test_pairs, "test_pairs", 2)
                   or task.pool
  task.test_counts = {}
  for _, ex in ipairs(task.test_pool) do
    task.test_counts[#ex[1]] = (task.test_counts[#ex[1]] or 0) + 1
  end
  local n = 0
  for _, ex in ipairs(task.pool) do
    if #ex[1] >= task.train_lengths[1] and #ex[1] <= task.train_lengths[2] then n = n + 1 end
  end
  if n == 0 then
    spec_fail(shown, 2, "no pair has a source of the training lengths %d..%d",
              task.train_lengths[1], task.train_lengths[2])
  end
  return task
end

--- compare.register_task(task or spec) -> task: define_task's task (made from spec when a
--- table is given) registered in glimpse.data.compare, so compare.task(name) and the grids
--- of this process find it.  Worker processes and MPI ranks find it when it comes from a
--- task file (load_task_file, grid's task_files, --task-file).
function T.register_task(t)
  if getmetatable(t) ~= OwnTask then
    local ok, task = pcall(T.define_task, t)
    if not ok then error(task, 2) end
    t = task
  end
  return shipped.register(t)
end

-- ---------------------------------------------------------------------------------------
-- task files

local LOADED = {}                -- absolute path -> the info of its last load
local FROM_FILES = {}            -- score name -> the task file that registered it

local function absolute(path)
  if path:sub(1, 1) == "/" then return path end
  local p = io.popen("pwd")
  local cwd = p:read("l")
  p:close()
  return (cwd or ".") .. "/" .. path:gsub("^%./", "")
end

--- compare.digest(text) -> 16 hex digits: the 64-bit FNV-1a hash of text (a task file's
--- content: a configuration's id holds it, so a changed file makes new ids)
function T.digest(text)
  return string.format("%016x", Rng.hash(text))
end

-- what a task file returned -> the task tables in it
local function task_tables(v, path)
  if v == nil then return {} end
  if type(v) ~= "table" then
    check.fail(4, "compare: task file %s must return a task table, a list of them, or nothing " ..
               "(a file that only registers scores), got %s", path, check.value(v))
  end
  if v.name ~= nil then return {v} end
  if #v > 0 then return v end
  if type(v.tasks) == "table" then                  -- a --config file: its tasks table
    local out = {}
    for _, t in ipairs(v.tasks) do
      if type(t) == "table" then out[#out + 1] = t end
    end
    return out
  end
  check.fail(4, "compare: task file %s returned a table that is neither a task (no name), a " ..
             "list of tasks nor a config with a tasks list", path)
end

--- compare.load_task_file(path) -> {path=, digest=, tasks={names}, scores={names}}: runs
--- the Lua file (its globals in a table of their own over _G, so it may require glimpse and
--- call glimpse.attention.register_score), registers the tasks it returns (a task table, a
--- list of them, nothing, or a --config table whose tasks list holds task tables) and
--- remembers which scores it registered.  A file already loaded with the same content is
--- not run again.  Errors name the file.
function T.load_task_file(path)
  if type(path) ~= "string" or path == "" then
    check.fail(2, "compare.load_task_file: path must be a non-empty string, got %s",
               check.value(path))
  end
  local abs = absolute(path)
  local ok, text = pcall(util.read_text, abs)
  if not ok then
    check.fail(2, "compare: task file %s: %s", path,
               (check.strip(text):gsub("^util%.read_text: ", "")))
  end
  local digest = T.digest(text)
  local prev = LOADED[abs]
  if prev and prev.digest == digest then return prev end
  local env = setmetatable({}, {__index = _G})
  local chunk, err = load(text, "@" .. path, "t", env)
  if not chunk then check.fail(2, "compare: task file %s: %s", path, tostring(err)) end
  local before = {}
  for _, s in ipairs(att.SCORES) do before[s] = true end
  local ok2, value = pcall(chunk)
  if not ok2 then check.fail(2, "compare: task file %s failed: %s", path, tostring(value)) end
  local info = {path = abs, digest = digest, tasks = {}, scores = {}}
  for _, s in ipairs(att.SCORES) do
    if not before[s] then info.scores[#info.scores + 1] = s end
  end
  for _, s in ipairs(prev and prev.scores or {}) do
    if before[s] then info.scores[#info.scores + 1] = s end
  end
  for _, s in ipairs(info.scores) do FROM_FILES[s] = abs end
  for _, spec in ipairs(task_tables(value, path)) do
    local okd, task = pcall(T.define_task, spec)
    if not okd then check.fail(2, "compare: task file %s: %s", path, check.strip(task)) end
    shipped.register(task)
    info.tasks[#info.tasks + 1] = task.name
  end
  LOADED[abs] = info
  return info
end

--- compare.score_file(name) -> the task file that registered score name, or nil (a built-in
--- score, or one registered by this process alone: worker processes would not know it)
function T.score_file(name)
  return FROM_FILES[name]
end

--- compare.ensure_task_files(files) -- a worker's first step: loads each {path=, digest=}
--- of a configuration's task_files, and refuses a file whose content is no longer the one
--- the configuration's id was made from
function T.ensure_task_files(files)
  for _, f in ipairs(files or {}) do
    local info = T.load_task_file(f.path)
    if info.digest ~= f.digest then
      check.fail(2, "compare: the task file %s has changed since this configuration was made " ..
                 "(digest %s, now %s): run the compare command again, which makes new ids",
                 f.path, tostring(f.digest), info.digest)
    end
  end
end

return T
