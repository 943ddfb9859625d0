--- glimpse.models.captioner (also glimpse.captioner and glimpse.models.Captioner) -- "Show,
-- Attend and Tell" (Xu et al. 2015): an image captioner with soft or hard attention over a
-- CNN's annotation grid, trained with teacher forcing, decoded with beam search, saved as one
-- self-contained safetensors file.
--
--   local Captioner = require("glimpse.models.captioner").Captioner
--   local cap = Captioner{vocab = ds.vocab, encoder = {name = "small", in_channels = 1}}
--   local loss, info = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
--   local words, tokens, alphas = cap:caption(image, {beam = 3})   -- "a bag above a coat"
--   cap:save("model.safetensors");  cap = Captioner.load("model.safetensors")
-- The folder: options.lua (OPTIONS, RECIPES), model.lua (the class), loss.lua, decode.lua
-- (captions, overlays), images.lua, checkpoint.lua, eval.lua (glimpse.models.caption_eval).
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

--- glimpse.captioner.pretrained(name) -> captioner (in evaluation mode): a shipped model by
--- name ("scenes-soft", "scenes-hard"), read from NAME.safetensors in the first of
--- model_dirs() that has it.  An unknown name is an error listing the available ones.
function M.pretrained(name)
  local path = checkpoint.find(name, "captioner.pretrained")
  local ok, cap = pcall(M.load, path)
  if not ok then check.fail(2, "captioner.pretrained: %s", check.strip(cap)) end
  return cap
end

return M
