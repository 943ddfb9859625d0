--- glimpse.models.captioner.checkpoint -- the Captioner in one safetensors file: the
-- state_dict, and in the metadata the config and the vocabulary as JSON (so loading needs
-- nothing else) and the REINFORCE baseline; the shipped models by name (models/ beside the
-- library, or $GLIMPSE_MODELS).  cap:save and cap:load_weights are methods of the Captioner
-- (model.lua mixes them into the class); Captioner.load and pretrained are in init.lua.
--
-- Checkpoints written before the options were renamed hold dim_embed, dim_hidden and
-- dim_att; the option spec takes them as aliases of emb, hidden and attn_hidden.
local check = require "glimpse.check"
local util = require "glimpse.util"
local Vocab = require "glimpse.data.vocab"
local common = require "glimpse.models.common"
local copts = require "glimpse.models.captioner.options"

local M = {}
local Captioner = {}   -- methods
M.methods = Captioner

local FORMAT = "glimpse.captioner"

--- cap:save(path) -> path.  One safetensors file: the state_dict, and in the metadata the
--- configuration and the vocabulary as JSON (so Captioner.load needs nothing else), the
--- REINFORCE baseline, and what the model knows: cap.description (text: the training
--- images and captions; cap:about shows it) and cap.familiar_summary (JSON "familiar":
--- statistics of training images, glimpse.captioner.familiar.summary) when set.  The write
--- is atomic (glimpse.save).
function Captioner:save(path)
  local baseline = self.baseline.value and string.format("%.17g", self.baseline.value)
  return common.save(self, path, FORMAT, {config = self.config, vocab = self.vocab:totable(),
                                          familiar = self.familiar_summary},
                     {baseline = baseline, description = self.description}, "Captioner:save")
end

--- checkpoint.knows(meta, path, fname) -> description, familiar summary: what a checkpoint's
--- metadata says the model knows (nil where it says nothing); a damaged summary is an error
function M.knows(meta, path, fname)
  local summary
  if meta.familiar then
    local ok, v = pcall(util.json_decode, meta.familiar)
    if not ok or type(v) ~= "table" or type(v.range) ~= "table" or type(v.histogram) ~= "table" then
      check.fail(3, "%s: %s: damaged metadata: 'familiar' is not a summary of training images",
                 fname, path)
    end
    summary = v
  end
  return meta.description, summary
end

-- an error (at level) unless the vocabularies mine and theirs (word lists) are the same
local function same_vocab(mine, theirs, fname, path, level)
  for k = 1, math.max(#mine, #theirs) do
    if mine[k] ~= theirs[k] then
      check.fail(level + 1, "%s: %s was trained with another vocabulary (word %d: %s, here %s)",
                 fname, path, k, tostring(theirs[k]), tostring(mine[k]))
    end
  end
end

--- checkpoint.read(path, opts, fname) -> o, state_dict, meta: the Captioner options a file
--- of cap:save holds (its vocabulary, its encoder rebuilt without initialising the weights)
--- and its weights.  opts.vocab: an error unless the saved vocabulary is that one.
function M.read(path, opts, fname)
  if opts ~= nil and type(opts) ~= "table" then
    check.fail(3, "%s: opts must be a table, got %s", fname, type(opts))
  end
  local sd, m, meta = common.load(path, FORMAT, {"config", "vocab"}, fname)
  if opts and opts.vocab then same_vocab(opts.vocab:totable(), m.vocab, fname, path, 3) end
  -- a damaged config or vocabulary is an error naming the file, whatever part of it is wrong
  local ok, o = pcall(function()
    local c = copts.from_checkpoint(m.config)
    c.vocab = Vocab.from_list(m.vocab)
    if type(m.config.encoder) ~= "table" then error("the config has no encoder table", 0) end
    c.encoder = common.copy(m.config.encoder)
    c.encoder.init = false                                      -- the weights come next
    return c
  end)
  if not ok then check.fail(3, "%s: %s: damaged metadata: %s", fname, path, check.strip(o)) end
  return o, sd, meta
end

--- cap:load_weights(path) -> cap: the weights of a saved captioner (Captioner.load's file),
--- e.g. a soft model to start hard attention from.  The sizes and the vocabulary must match.
function Captioner:load_weights(path)
  local fname = "Captioner:load_weights"
  local sd, m = common.load(path, FORMAT, {"vocab"}, fname)
  same_vocab(self.vocab:totable(), m.vocab, fname, path, 2)
  local ok, err = pcall(self.load_state_dict, self, sd)
  if not ok then
    check.fail(2, "%s: %s does not fit this model: %s", fname, path, check.strip(err))
  end
  return self
end

local function file_exists(path)
  return require("glimpse")._file_kind(path) == "file"
end

--- glimpse.captioner.model_dirs() -> the folders pretrained(name) looks in, in order: those
--- in $GLIMPSE_MODELS (':'-separated), then models/ beside the library's tree (the source
--- tree's models/, or $(PREFIX)/share/glimpse/models where `make install` puts them).
function M.model_dirs()
  local dirs = {}
  for d in (os.getenv("GLIMPSE_MODELS") or ""):gmatch("[^:]+") do dirs[#dirs + 1] = d end
  local src = debug.getinfo(1, "S").source
  local here = src:sub(1, 1) == "@" and src:sub(2):match("^(.*)/[^/]*$") or ""
  local root = here:match("^(.*)/bindings/glimpse$") or here:match("^(.*)/bindings/glimpse/")
  if root then dirs[#dirs + 1] = root .. "/models" end
  local prefix = here:match("^(.*)/share/lua/[%d%.]+/glimpse")
  if prefix then dirs[#dirs + 1] = prefix .. "/share/glimpse/models" end
  return dirs
end

--- glimpse.captioner.available() -> the sorted names of the models pretrained() can load
--- (the NAME of every NAME.safetensors in model_dirs()).
function M.available()
  local names, seen = {}, {}
  for _, d in ipairs(M.model_dirs()) do
    local p = io.popen("ls -1 " .. util.shell_quote(d) .. " 2>/dev/null")
    for f in p:lines() do
      local n = f:match("^(.+)%.safetensors$")
      if n and not seen[n] then
        seen[n] = true
        names[#names + 1] = n
      end
    end
    p:close()
  end
  table.sort(names)
  return names
end

--- checkpoint.find(name, fname) -> the path of the shipped model NAME.safetensors in the
--- first of model_dirs() that has it; an unknown name is an error (at the caller of find's
--- caller) listing the available ones
function M.find(name, fname)
  if type(name) ~= "string" or not name:match("^[%w_%-%.]+$") then
    check.fail(3, "%s: name must be a model name such as \"scenes-soft\", got %s", fname,
               type(name) == "string" and string.format("%q", name) or type(name))
  end
  local dirs = M.model_dirs()
  for _, d in ipairs(dirs) do
    local path = d .. "/" .. name .. ".safetensors"
    if file_exists(path) then return path end
  end
  local avail = M.available()
  check.fail(3, "%s: no model named %q (looked in %s); available: %s", fname, name,
             #dirs > 0 and table.concat(dirs, ", ") or "no models/ folder found",
             #avail > 0 and table.concat(avail, ", ") or "none")
end

return M
