--- glimpse.models.common -- what the whole-model classes (Seq2Seq, PointerNet, NTM) share:
-- option checks that name the class and the option, and checkpoints (one safetensors file:
-- the state_dict, with the configuration and the vocabularies as JSON in the metadata, so
-- that Model.load needs nothing else).  Internal to glimpse.models; no model is required here.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"

local M = {}

local fail = check.fail
M.fail, M.strip = check.fail, check.strip

-- a Vocab, a full id list (specials first, as vocab:totable() gives) or a token list
local function make_vocab(cls, v, key, level)
  if type(v) ~= "table" then
    fail(level + 1, "%s: option '%s' must be a vocabulary (glimpse.data.Vocab) or a token list, " ..
                    "got %s (or pass dataset=)", cls, key, type(v))
  end
  local Vocab = require "glimpse.data.vocab"
  if v.itos and v.stoi then return v end
  if v[1] == Vocab.SPECIALS[1] then return Vocab.from_list(v) end
  return Vocab.new(v)
end

--- common.with_vocabs(entries) -> entries after the options of a sequence model's data
--- (dataset, src_vocab, tgt_vocab, task), for glimpse.options.declare
function M.with_vocabs(entries)
  local out = {
    {"dataset", "table", nil, help = "a seq2seq dataset: its src_vocab, tgt_vocab and task"},
    {"src_vocab", "table", nil, help = "source vocabulary (a Vocab, id list or token list)"},
    {"tgt_vocab", "table", nil, help = "target vocabulary (a Vocab, id list or token list)"},
    {"task", "string", nil, help = "the task's name (kept in the checkpoint)"},
  }
  for _, e in ipairs(entries) do out[#out + 1] = e end
  return out
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
-- keys: the JSON-encoded metadata entries the checkpoint must have; each must decode to a
-- table (a config, a vocabulary), else the error names the file and the entry.
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
    local okj, v = pcall(util.json_decode, meta[k])
    if not okj then
      fail(3, "%s: %s: metadata '%s' is not JSON (%s)", fname, path, k, M.strip(v))
    end
    if type(v) ~= "table" then
      fail(3, "%s: %s: metadata '%s' must be a JSON object or list, got %s", fname, path, k,
           v == null and "null" or type(v))
    end
    v = check.integers(v)
    for kk, x in pairs(v) do if x == null then v[kk] = nil end end
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

--- common.checkpoints(Class, mod, cls, format, vocabs): Class:save(path, meta) and
--- mod.load(path) (also Class.load) for a model whose file holds its config (and, with
--- vocabs, its src_vocab and tgt_vocab); Class.from_checkpoint(config) may adjust the
--- options the loader builds the model from, Class.after_load(model, meta, config) restore
--- more (config: the file's).
function M.checkpoints(Class, mod, cls, format, vocabs)
  local keys = vocabs and {"config", "src_vocab", "tgt_vocab"} or {"config"}
  function Class:save(path, meta)
    local extra = {config = self.config}
    if vocabs then extra.src_vocab, extra.tgt_vocab = self.src_vocab:totable(), self.tgt_vocab:totable() end
    if self.checkpoint_extra then self:checkpoint_extra(extra) end
    return M.save(self, path, format, extra, meta, cls .. ":save")
  end
  function mod.load(path)
    local sd, m, meta = M.load(path, format, keys, cls .. ".load")
    local o = M.copy(m.config)
    if vocabs then
      local Vocab = require "glimpse.data.vocab"
      o.src_vocab, o.tgt_vocab = Vocab.from_list(m.src_vocab), Vocab.from_list(m.tgt_vocab)
    end
    if Class.from_checkpoint then o = Class.from_checkpoint(o) end
    local ok, model = pcall(Class, o)      -- a config the options refuse: name the file
    if not ok then fail(2, "%s.load: %s: %s", cls, path, M.strip(model)) end
    M.load_weights(model, sd, path, cls .. ".load")
    if Class.after_load then Class.after_load(model, meta, m.config) end
    return model, meta
  end
  Class.load = mod.load
end

-- the options a model's :decode may take, declared once; each model picks its own
local DECODE = {
  beam = {"beam", "int", 1, range = {1}, help = "beam width (1: greedy decoding)"},
  max_len = {"max_len", "int", nil, range = {1}, help = "most output steps (default: the model's)"},
  length_penalty = {"length_penalty", "number", nil,
                    help = "beam search's length normalisation alpha (default: the model's)"},
}

--- common.decode_spec(fname, names) -> the glimpse.options spec of a model's :decode options
--- (names: a list of "beam", "max_len", "length_penalty")
function M.decode_spec(fname, names)
  local entries = {}
  for i, n in ipairs(names) do entries[i] = DECODE[n] end
  return options.declare(fname, entries)
end

--- common.decode(model, make_state, step, o) -> outputs, extras: glimpse.decode over the
--- model's own step in evaluation mode without a tape (the mode is put back, also on an
--- error).  make_state() -> the decoding state; step(y, state, t) as glimpse.decode takes it;
--- o: glimpse.decode's options, o.beam > 1 for beam search (else greedy).  outputs[b]: the
--- tokens of row b's best hypothesis; extras = {alignments = {b -> rows}, scores = {b ->
--- log-probability}, finished = {b -> boolean}, no_finite_score = {b -> true when the model
--- gave no finite log-probability to rank (NaN or -inf everywhere)}, n_best = {b -> the
--- hypotheses decode.beam ranked, best first} (beam > 1 only), maps = {b -> the best
--- hypothesis's maps, keyed by module path, one row per step} (beam > 1 inside
--- glimpse.attention.capture only)}.
function M.decode(model, make_state, step, o)
  local search = require "glimpse.decode"
  local was_training = model.training
  model:evaluate()
  local ok, outs, extras = pcall(glimpse.no_grad, function()
    local st = make_state()
    local preds, ex = {}, {alignments = {}, scores = {}, finished = {}, no_finite_score = {}}
    if (o.beam or 1) == 1 then
      local g = M.copy(o)
      g.beam, g.length_penalty = nil, nil
      local toks, scores, al, fin = search.greedy(step, st, g)
      preds, ex.scores, ex.finished = toks, scores, fin
      for i = 1, #toks do
        ex.alignments[i] = al and al[i] or {}
        local s = scores[i]
        ex.no_finite_score[i] = s ~= s or s == -math.huge
      end
    else
      ex.n_best = search.beam(step, st, o)
      for i, h in ipairs(ex.n_best) do
        preds[i], ex.alignments[i], ex.scores[i], ex.finished[i] =
          h[1].tokens, h[1].alignment, h[1].log_prob, h[1].finished
        ex.no_finite_score[i] = h[1].no_finite_score or false
        if h[1].maps then                     -- under glimpse.attention.capture
          ex.maps = ex.maps or {}
          ex.maps[i] = h[1].maps
        end
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
