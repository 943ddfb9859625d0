--- glimpse.models.captioner (also glimpse.captioner and glimpse.models.Captioner) -- "Show,
-- Attend and Tell" (Xu et al. 2015): an image captioner with soft or hard attention over a
-- CNN's annotation grid, trained with teacher forcing, decoded with beam search, saved as one
-- self-contained safetensors file.
--
--   local Captioner = require("glimpse.models.captioner").Captioner
--   local cap = Captioner{vocab = ds.vocab, encoder = {name = "small", in_channels = 1}}
--   local loss, info = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
--   local words = cap:caption(image, {beam = 3})                  -- "a bag above a coat"
--   local words, info = cap:caption(image, {maps = true})         -- info.alphas, info.familiar
--   print(cap:about())                   -- what it was trained on: the only images it knows
--   cap:save("model.safetensors");  cap = Captioner.load("model.safetensors")
-- The folder: options.lua (OPTIONS, RECIPES), model.lua (the class), loss.lua, decode.lua
-- (captions, overlays), images.lua, checkpoint.lua, familiar.lua (is an image like the
-- training images?), eval.lua (glimpse.models.caption_eval).
local check = require "glimpse.check"
local common = require "glimpse.models.common"
local copts = require "glimpse.models.captioner.options"
local model = require "glimpse.models.captioner.model"
local checkpoint = require "glimpse.models.captioner.checkpoint"

local M = {}

local Captioner = model.Captioner
M.Captioner = Captioner
M.OPTIONS = copts.OPTIONS
M.RECIPES = copts.RECIPES
M.recipe_names, M.recipe_options = copts.recipe_names, copts.recipe_options
M.with_recipe, M.add_flags = copts.with_recipe, copts.add_flags
Captioner.options = copts.OPTIONS                -- what ?Captioner lists
M.model_dirs = checkpoint.model_dirs
M.available = checkpoint.available
M.familiar = require "glimpse.models.captioner.familiar"

--- Captioner.load(path [, {vocab=, hard_eval=, length_penalty=}]) -> captioner (in
--- evaluation mode) from a file cap:save wrote (also glimpse.captioner.load).  vocab: the
--- vocabulary of the data it will see; an error unless the saved one is the same (word ids
--- would mean other words).  hard_eval, length_penalty: read it another way than it was
--- saved with (cap:set_hard_eval, config.length_penalty).
function M.load(path, opts)
  local ok, cap = pcall(function()
    local o, sd, meta = checkpoint.read(path, opts, "Captioner.load")
    local okc, built = pcall(Captioner, o)   -- a config the options refuse: name the file
    if not okc then error(string.format("Captioner.load: %s: %s", path, check.strip(built)), 0) end
    local cap = common.load_weights(built, sd, path, "Captioner.load")
    cap.description, cap.familiar_summary = checkpoint.knows(meta, path, "Captioner.load")
    if meta.baseline then cap.baseline.value = tonumber(meta.baseline) end
    if opts and opts.hard_eval then cap:set_hard_eval(opts.hard_eval) end
    if opts and opts.length_penalty then
      cap.config.length_penalty = copts.OPTIONS:check_value("length_penalty", opts.length_penalty)
    end
    return cap
  end)
  if not ok then check.fail(2, "%s", check.strip(cap)) end
  return cap
end
Captioner.load = M.load

--- glimpse.captioner.pretrained(name) -> captioner (in evaluation mode), about: a shipped model by
--- name ("scenes-soft", "scenes-hard"), read from NAME.safetensors in the first of
--- model_dirs() that has it, and what it knows (cap:about(): the images and captions it was
--- trained on -- the shipped models know only 64x64 grey scenes of Fashion-MNIST items).
--- An unknown name is an error listing the available ones.
function M.pretrained(name)
  local path = checkpoint.find(name, "captioner.pretrained")
  local ok, cap = pcall(M.load, path)
  if not ok then check.fail(2, "captioner.pretrained: %s", check.strip(cap)) end
  return cap, cap:about()
end

--- glimpse.captioner.about([name]) -> text: what the shipped model name knows (its
--- checkpoint's description), or with no name every shipped model's; `?glimpse.captioner`
--- shows it
function M.about(name)
  if name == M then name = nil end      -- called as a method (the REPL's ?glimpse.captioner)
  if name ~= nil and type(name) ~= "string" then
    check.fail(2, "captioner.about: name must be a model name or nil, got %s", type(name))
  end
  local names = name and {name} or checkpoint.available()
  local out = {}
  for _, n in ipairs(names) do
    local path = checkpoint.find(n, "captioner.about")
    local ok, _, meta = pcall(require("glimpse").load, path)
    local text = ok and meta and meta.description or "(its checkpoint does not say what it knows)"
    out[#out + 1] = n .. ": " .. text:gsub("\n", "\n  ")
  end
  if #out == 0 then return "no shipped models found" end
  return table.concat(out, "\n")
end

return M
