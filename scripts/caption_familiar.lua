-- scripts/caption_familiar.lua -- how often a captioner's familiarity check
-- (cap:familiar, glimpse.captioner.familiar) flags test scenes, which it should not, and
-- other pictures, which it should: photos and pictures found on this machine, noise, single
-- Fashion-MNIST items, blank images and inverted scenes.  docs/experiments/caption.md
--
--   glimpse scripts/caption_familiar.lua [--model scenes-soft] [--scenes 1000]
--                                        [--pictures /usr/share] [--count 40]
-- Prints one line per kind of image: how many were flagged, and the most common reason.
local glimpse = require "glimpse"
local util = glimpse.util

local p = require("argparse")("caption_familiar", "Measure the captioner's familiarity check.")
p:option("--model", "a shipped model's name or a .safetensors file", "scenes-soft")
p:option("--scenes", "test scenes (split test, seed 1)", "1000"):convert(math.tointeger)
p:option("--pictures", "a folder searched for .jpg, .jpeg and .png files", "/usr/share")
p:option("--count", "pictures taken (evenly from the sorted list, both sides >= 32)", "40")
  :convert(math.tointeger)
p:option("--seed", "seed of the noise", "1"):convert(math.tointeger)
local args = p:parse(arg)

local cap = args.model:match("%.safetensors$") and glimpse.captioner.load(args.model) or
            glimpse.captioner.pretrained(args.model)
assert(cap.familiar_summary, args.model .. " keeps no summary of its training images")
local C, H, W = cap:input_shape()
glimpse.manual_seed(args.seed)

local rows = {}
-- check a list of images (tensors or file names): the share flagged and the reasons' heads
local function measure(kind, images)
  local flagged, why = 0, {}
  for _, im in ipairs(images) do
    local ok, reasons = cap:familiar(im, {resize = true})
    if not ok then
      flagged = flagged + 1
      local head = reasons[1]:match("^(.-) [%d%-]") or reasons[1]
      why[head] = (why[head] or 0) + 1
    end
  end
  local top, best = "-", 0
  for k, n in pairs(why) do
    if n > best or (n == best and k < top) then top, best = k, n end
  end
  rows[#rows + 1] = {kind, #images, flagged}
  print(string.format("%-34s %5d images  %5d flagged (%5.1f%%)  first reason mostly: %s",
                      kind, #images, flagged, 100 * flagged / math.max(1, #images), top))
end

-- test scenes (should pass) and inverted ones (should not)
local t0 = glimpse.clock()
local test = glimpse.data.scenes.generate{split = "test", n = args.scenes, seed = 1}
local scenes, inverted = {}, {}
for i = 1, test.n do
  scenes[i] = test:image(i)
  if i <= 200 then inverted[i] = 1 - scenes[i] end
end
measure("test scenes", scenes)

-- pictures on this machine: every .jpg/.jpeg/.png under --pictures, sorted, both sides at
-- least 32, --count of them evenly spread over the list
local found = {}
local pipe = io.popen("find " .. util.shell_quote(args.pictures) .. " -type f \\( -iname '*.jpg' " ..
                      "-o -iname '*.jpeg' -o -iname '*.png' \\) 2>/dev/null | LC_ALL=C sort")
for line in pipe:lines() do
  local ok, info = pcall(glimpse.image.info, line)
  if ok and info.width >= 32 and info.height >= 32 then found[#found + 1] = line end
end
pipe:close()
local pictures = {}
for k = 1, math.min(args.count, #found) do
  pictures[k] = found[math.floor((k - 1) * #found / math.min(args.count, #found)) + 1]
end
measure(string.format("pictures (of %d found)", #found), pictures)

-- noise of several kinds and sizes
local noise = {}
for k = 1, 10 do
  noise[#noise + 1] = glimpse.rand(C, H, W)                         -- uniform
  noise[#noise + 1] = glimpse.rand(3, 2 * H, 2 * W)                 -- colour, larger
  noise[#noise + 1] = glimpse.rand(C, H, W):pow(4)                  -- dark
  noise[#noise + 1] = (glimpse.rand(C, H, W) - 0.95):clamp(0, 1) * 20   -- sparse white dots
  noise[#noise + 1] = glimpse.image.resize(glimpse.rand(C, 8 + k, 8 + k), H, W)  -- smooth
end
measure("noise (5 kinds)", noise)

-- single Fashion-MNIST items (test file), 28x28 resized to the model's size
local items = glimpse.data.fashion_mnist.load("test", {limit = 100})
local single = {}
for i = 1, items.shape[1] do single[i] = items[i] end
measure("single Fashion-MNIST items", single)

-- blank images: constant grey levels, two sizes
local blank = {}
for _, v in ipairs({0, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1}) do
  blank[#blank + 1] = glimpse.zeros(C, H, W) + v
  blank[#blank + 1] = glimpse.zeros(3, 3 * H, 2 * W) + v
end
measure("blank images", blank)
measure("inverted test scenes", inverted)

local other, flagged = 0, 0
for k = 2, #rows do other, flagged = other + rows[k][2], flagged + rows[k][3] end
print(string.format("test scenes flagged: %.1f%% of %d; other images flagged: %.1f%% of %d (%.0fs)",
                    100 * rows[1][3] / rows[1][2], rows[1][2], 100 * flagged / other, other,
                    glimpse.clock() - t0))
