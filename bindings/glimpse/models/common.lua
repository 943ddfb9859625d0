--- glimpse.models.common -- what the whole-model classes (Seq2Seq, PointerNet, NTM) share:
-- option checks that name the class and the option, and checkpoints (one safetensors file:
-- the state_dict, with the configuration and the vocabularies as JSON in the metadata, so
-- that Model.load needs nothing else).  Internal to glimpse.models; no model is required here.
local glimpse = require "glimpse"

local M = {}

local function fail(level, fmt, ...)
  error(string.format(fmt, ...), level + 1)
end
M.fail = fail

-- the message of a caught error without its "file:line: " prefix
function M.strip(err)
  return (tostring(err):gsub("^[^:]*:%d+: ", ""))
end

-- a Vocab, a full id list (specials first, as vocab:totable() gives) or a token list
local function make_vocab(cls, v, key, level)
  if type(v) ~= "table" then
    fail(level + 1, "%s: option '%s' must be a vocabulary (datasets/vocab.lua) or a token list, " ..
                    "got %s (or pass dataset=)", cls, key, type(v))
  end
  local Vocab = require "glimpse.data.vocab"
  if v.itos and v.stoi then return v end
  if v[1] == Vocab.SPECIALS[1] then return Vocab.from_list(v) end
  return Vocab.new(v)
end

--- checks.vocabs(cls, o, level) -> src_vocab, tgt_vocab, dataset: a sequence model's two
--- vocabularies from o.dataset (a datasets/seq2seq_tasks.lua dataset) or o.src_vocab and
--- o.tgt_vocab (a Vocab, an id list or a token list), checked
function M.vocabs(cls, o, level)
  local ds = o.dataset
  if ds ~= nil and (type(ds) ~= "table" or not ds.src_vocab or not ds.tgt_vocab) then
    fail(level + 1, "%s: option 'dataset' must be a seq2seq dataset with src_vocab and tgt_vocab", cls)
  end
  return make_vocab(cls, o.src_vocab or (ds and ds.src_vocab), "src_vocab", level + 1),
         make_vocab(cls, o.tgt_vocab or (ds and ds.tgt_vocab), "tgt_vocab", level + 1), ds
end

--- checks.positive_int(cls, o, key, default, level) -> o[key] (a positive integer) or default
function M.positive_int(cls, o, key, default, level)
  local v = o[key]
  if v == nil then return default end
  if math.type(v) ~= "integer" or v < 1 then
    fail(level + 1, "%s: option '%s' must be a positive integer, got %s", cls, key, tostring(v))
  end
  return v
end

--- checks.nonneg_int(cls, o, key, default, level) -> an integer >= 0
function M.nonneg_int(cls, o, key, default, level)
  local v = o[key]
  if v == nil then return default end
  if math.type(v) ~= "integer" or v < 0 then
    fail(level + 1, "%s: option '%s' must be an integer >= 0, got %s", cls, key, tostring(v))
  end
  return v
end

--- checks.number_in(cls, o, key, default, lo, hi, level) -> a number in [lo, hi]
function M.number_in(cls, o, key, default, lo, hi, level)
  local v = o[key]
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or v < lo or v > hi then
    fail(level + 1, "%s: option '%s' must be a number in [%g, %g], got %s", cls, key, lo, hi,
         tostring(v))
  end
  return v
end

--- checks.one_of(cls, o, key, default, list, what, level) -> o[key] when it is in list
function M.one_of(cls, o, key, default, list, what, level)
  local v = o[key]
  if v == nil then v = default end
  for _, x in ipairs(list) do if x == v then return v end end
  fail(level + 1, "%s: unknown %s '%s' (one of %s)", cls, what or key, tostring(v),
       table.concat(list, ", "))
end

--- checks.bool(o, key, default) -> boolean
function M.bool(o, key, default)
  local v = o[key]
  if v == nil then return default end
  return v and true or false
end

--- checks.known_keys(cls, o, allowed, level): a misspelt option is an error, not ignored
function M.known_keys(cls, o, allowed, level)
  local ok = {}
  for _, k in ipairs(allowed) do ok[k] = true end
  for k in pairs(o) do
    if not ok[k] then
      local names = {}
      for _, a in ipairs(allowed) do names[#names + 1] = a end
      table.sort(names)
      fail(level + 1, "%s: unknown option '%s' (options: %s)", cls, tostring(k),
           table.concat(names, ", "))
    end
  end
end

-- JSON numbers come back as floats: integral ones become integers again (sizes, ids)
local function integers(v)
  if type(v) == "number" then return math.tointeger(v) or v end
  if type(v) ~= "table" then return v end
  for k, x in pairs(v) do v[k] = integers(x) end
  return v
end

--- common.save(model, path, format, extra_meta, user_meta, fname) -> path.
-- extra_meta: name -> Lua value (JSON-encoded into the metadata: config, vocabularies);
-- user_meta: name -> string or number (kept as text; may not reuse a reserved name).
-- glimpse.save writes a temporary file and renames it (atomic).
function M.save(model, path, format, extra_meta, user_meta, fname)
  if type(path) ~= "string" then fail(3, "%s: path must be a string, got %s", fname, type(path)) end
  if user_meta ~= nil and type(user_meta) ~= "table" then
    fail(3, "%s: meta must be a table of strings, got %s", fname, type(user_meta))
  end
  local util = require "glimpse.util"
  local meta = {format = format, version = "1"}
  for k, v in pairs(extra_meta) do meta[k] = util.json_encode(v) end
  for k, v in pairs(user_meta or {}) do
    if meta[k] ~= nil then fail(3, "%s: meta key '%s' is reserved", fname, tostring(k)) end
    if type(v) ~= "string" and type(v) ~= "number" then
      fail(3, "%s: meta['%s'] must be a string or a number, got %s", fname, tostring(k), type(v))
    end
    meta[k] = tostring(v)
  end
  local ok, err = pcall(glimpse.save, path, model:state_dict(), meta)
  if not ok then fail(3, "%s: %s", fname, M.strip(err)) end
  return path
end

--- common.load(path, format, keys, fname) -> state_dict, decoded {key = value}, raw meta.
-- keys: the JSON-encoded metadata entries the checkpoint must have.
function M.load(path, format, keys, fname)
  if type(path) ~= "string" then fail(3, "%s: path must be a string, got %s", fname, type(path)) end
  local ok, sd, meta = pcall(glimpse.load, path)
  if not ok then fail(3, "%s: %s", fname, M.strip(sd)) end
  meta = meta or {}
  if meta.format ~= format then
    fail(3, "%s: %s is not a %s checkpoint (its metadata says format '%s')", fname, path,
         format, tostring(meta.format))
  end
  local util = require "glimpse.util"
  local null = require("cjson").null
  local out = {}
  for _, k in ipairs(keys) do
    if meta[k] == nil then fail(3, "%s: %s has no '%s' in its metadata", fname, path, k) end
    local v = integers(util.json_decode(meta[k]))
    if type(v) == "table" then
      for kk, x in pairs(v) do if x == null then v[kk] = nil end end
    end
    out[k] = v
  end
  return sd, out, meta
end

--- common.load_weights(model, sd, path, fname): strict load_state_dict with a named error
function M.load_weights(model, sd, path, fname)
  local ok, err = pcall(model.load_state_dict, model, sd)
  if not ok then fail(3, "%s: %s: %s", fname, path, M.strip(err)) end
  model:evaluate()
  return model
end

--- common.decode_options(fname, opts, level) -> opts (a table), beam (a positive integer,
--- default 1): the checked options of a model's :decode
function M.decode_options(fname, opts, level)
  if opts ~= nil and type(opts) ~= "table" then
    fail(level + 1, "%s: opts must be a table {beam=, max_len=}, got %s", fname, type(opts))
  end
  opts = opts or {}
  return opts, M.positive_int(fname, opts, "beam", 1, level + 1)
end

--- common.decode(model, make_state, step, o) -> outputs, extras: glimpse.decode over the
--- model's own step in evaluation mode without a tape (the mode is put back, also on an
--- error).  make_state() -> the decoding state; step(y, state, t) as glimpse.decode takes it;
--- o: glimpse.decode's options, o.beam > 1 for beam search (else greedy).  outputs[b]: the
--- tokens of row b's best hypothesis; extras = {alignments = {b -> rows}, scores = {b ->
--- log-probability}, finished = {b -> boolean}}.
function M.decode(model, make_state, step, o)
  local search = require "glimpse.decode"
  local was_training = model.training
  model:evaluate()
  local ok, outs, extras = pcall(glimpse.no_grad, function()
    local st = make_state()
    local preds, ex = {}, {alignments = {}, scores = {}, finished = {}}
    if (o.beam or 1) == 1 then
      local g = M.copy(o)
      g.beam, g.length_penalty = nil, nil
      local toks, scores, al, fin = search.greedy(step, st, g)
      preds, ex.scores, ex.finished = toks, scores, fin
      for i = 1, #toks do ex.alignments[i] = al and al[i] or {} end
    else
      for i, h in ipairs(search.beam(step, st, o)) do
        preds[i], ex.alignments[i], ex.scores[i], ex.finished[i] =
          h[1].tokens, h[1].alignment, h[1].log_prob, h[1].finished
      end
    end
    return preds, ex
  end)
  if was_training then model:train() end
  if not ok then error(outs, 0) end
  return outs, extras
end

--- common.copy(t) -> a shallow copy of a table
function M.copy(t)
  local o = {}
  for k, v in pairs(t) do o[k] = v end
  return o
end

--- common.vocab(cls, v, key, level) -> option `key` as a Vocab: v is a Vocab, a full id list
--- (specials first, as vocab:totable() gives) or a token list
function M.vocab(cls, v, key, level)
  return make_vocab(cls, v, key, level + 1)
end

--- common.ids(x, what, fname, level) -> x as a (B,T) tensor of 1-based ids (a nested table is
--- converted), or an error naming fname and what
function M.ids(x, what, fname, level)
  local check = glimpse.check
  if type(x) == "table" then
    local ok, t = pcall(glimpse.tensor, x)
    if not ok then
      check.fail(level + 1, "%s: %s must be a (B,T) table of ids: %s", fname, what, check.strip(t))
    end
    x = t
  end
  if not glimpse.is_tensor(x) or x:dim() ~= 2 then
    check.fail(level + 1, "%s: %s must be a (B,T) tensor of 1-based ids, got %s", fname, what,
               check.shape(x))
  end
  return x
end

return M
