-- scripts/caption_describe.lua -- write into captioner checkpoints what the models know: a
-- description of their training images and captions ("description", shown by cap:about(),
-- pretrained(), `glimpse caption --help` and `?cap` at the REPL) and a summary of the
-- statistics of 2000 training scenes ("familiar", glimpse.captioner.familiar.summary: what
-- flags an unfamiliar image).  The weights are read and written back unchanged (checked).
--
--   glimpse scripts/caption_describe.lua models/scenes-soft.safetensors models/scenes-hard.safetensors
-- (how models/scenes-*.safetensors got their description; --n, --seed: the scenes summarised)
local glimpse = require "glimpse"
local familiar = glimpse.captioner.familiar
local util = glimpse.util

local p = require("argparse")("caption_describe", "Describe the scenes captioners in their checkpoints.")
p:argument("files", "captioner checkpoints trained on glimpse.data.scenes"):args("+")
p:option("--n", "training scenes summarised", "2000"):convert(math.tointeger)
p:option("--seed", "the scenes' seed (the training runs used 1)", "1"):convert(math.tointeger)
local args = p:parse(arg)

-- how many training scenes each shipped model saw (models/README.md)
local SEEN = {["scenes-soft"] = "20000 scenes of seed 1, then 40000 (the first 20000 and 20000 " ..
                                "more), then self-critical training on the first 20000",
              ["scenes-hard"] = "20000 scenes of seed 1, then self-critical training on the same " ..
                                "scenes"}

local function description(name, vocab)
  local words = {}
  for i, w in ipairs(vocab) do
    if i > 4 then words[#words + 1] = w end
  end
  return table.concat({
    "64x64 grey scenes of 2-4 Fashion-MNIST items on a black background",
    "images: 1 channel, 64x64 pixels, values in [0,1], the background exactly 0; 2 to 4 " ..
      "items of 28x28 pixels (distinct classes, never overlapping) from Fashion-MNIST's " ..
      "training images; no clutter",
    "made by glimpse.data.scenes.generate{split = \"train\", seed = 1} (datasets/scenes.lua): " ..
      (SEEN[name] or "scenes of seed 1"),
    "captions: the items and where they lie, e.g. \"a bag above a sneaker and a shirt to " ..
      "the right of the bag\" (datasets/scene_text.lua)",
    string.format("vocabulary (%d words): %s", #words, table.concat(words, " ")),
    "anything else (a photo, colour, other objects, another size) still gets a caption in " ..
      "these words, which then says nothing about the picture"}, "\n")
end

local t0 = glimpse.clock()
local scenes = glimpse.data.scenes.generate{split = "train", n = args.n, seed = args.seed}
local summary = familiar.summary(scenes.images)
print(string.format("summary of %d training scenes (%.1fs)", args.n, glimpse.clock() - t0))
for _, k in ipairs(familiar.NAMES) do
  print(string.format("  %-10s %.4g .. %.4g", k, summary.range[k][1], summary.range[k][2]))
end

for _, path in ipairs(args.files) do
  local sd, meta = glimpse.load(path)
  assert(meta and meta.format == "glimpse.captioner", path .. " is not a captioner checkpoint")
  local name = path:match("([^/]+)%.safetensors$") or path
  meta.description = description(name, util.json_decode(meta.vocab))
  meta.familiar = util.json_encode(summary)
  glimpse.save(path, sd, meta)
  local back = glimpse.load(path)                      -- the weights are those read
  local n = 0
  for k, t in pairs(sd) do
    assert(back[k] and back[k].shape[1] == t.shape[1] and (back[k] - t):abs():max():item() == 0,
           path .. ": " .. k .. " changed")
    n = n + 1
  end
  print(string.format("%s: described; %d tensors unchanged", path, n))
end
