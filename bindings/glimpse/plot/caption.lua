--- glimpse.plot.caption -- where a caption's words looked: a PNG strip of the image and one
-- attention overlay per word, the word printed under it (cap:overlays draws through it).
--
--   local caption_plot = require "glimpse.plot.caption"
--   caption_plot.overlays(image, alphas, {"a", "bag"}, "strip.png", {grid = {4, 4}})
--
-- Maps share one colour scale by default (0 .. the caption's largest weight), so a sharp map
-- looks sharp and a flat one flat; a colour bar under the strip shows it (viridis, as the
-- heatmaps of glimpse.viz and the report's attention viewer).  A long caption wraps: by
-- default as many panels to a row as fit M.PAGE_WIDTH (1200 px, a report page's width).
local glimpse = require "glimpse"
local check = require "glimpse.check"
local viz = require "glimpse.plot.viz"

local M = {}

M.SCALE = 2          -- images are drawn at twice their size (64 -> 128 pixels)
M.PAGE_WIDTH = 1200  -- px: the widest strip the default ncol makes

-- words as a list: a string is split on spaces
local function word_list(words)
  if type(words) ~= "string" then return words end
  local list = {}
  for w in words:gmatch("%S+") do list[#list + 1] = w end
  return list
end

-- the (gh, gw) grid of an H x W image with L cells: opts.grid as {gh, gw} or a function
-- (H, W) -> gh, gw, else a square grid
local function grid_of(grid, H, W, L)
  if type(grid) == "function" then return grid(H, W) end
  if type(grid) == "table" then return grid[1], grid[2] end
  local side = math.floor(math.sqrt(L) + 0.5)
  return side, side
end

--- caption_plot.overlays(image, alphas (T,L), words, path, {grid=, scale=2, alpha=0.6,
---                       colormap="viridis", normalise="shared", title="image", ncol=},
---                       fname) -> path
-- image: (C,H,W) in [0,1] (the picture as seen, before normalisation) or a file name;
-- words: a string (split on spaces) or a list with one entry per row of alphas.  grid: the
-- annotation grid {gh, gw} or a function (H, W) -> gh, gw (default: square).
-- normalise="shared": every map on one scale, 0 .. the largest weight of the caption;
-- "each": every map stretched to its own min..max (glimpse.image.overlay's own).  ncol:
-- panels per row (default: as many as fit M.PAGE_WIDTH).  fname names the caller in errors.
function M.overlays(img, alphas, words, path, opts, fname)
  opts = opts or {}
  fname = fname or "caption_plot.overlays"
  local image = glimpse.image
  if type(img) == "string" then img = image.load(img) end
  if not glimpse.is_tensor(img) or img:dim() ~= 3 then
    check.fail(2, "%s: image must be a (C,H,W) tensor or a file name, got %s", fname,
               check.shape(img))
  end
  words = word_list(words)
  if type(words) ~= "table" then check.fail(2, "%s: words must be a string or a list", fname) end
  if glimpse.is_tensor(alphas) and alphas:dim() == 2 and alphas.shape[1] == 0 then alphas = {} end
  if type(alphas) == "table" and #alphas > 0 then alphas = glimpse.tensor(alphas) end
  local T = glimpse.is_tensor(alphas) and alphas.shape[1] or 0
  if glimpse.is_tensor(alphas) and alphas:dim() ~= 2 then
    check.fail(2, "%s: alphas must be (T,L), got %s", fname, check.shape(alphas))
  end
  if T ~= #words then check.fail(2, "%s: %d words but %d attention rows", fname, #words, T) end
  if type(path) ~= "string" then check.fail(2, "%s: path must be a string", fname) end
  local norm = opts.normalise or "shared"
  if norm ~= "shared" and norm ~= "each" then
    check.fail(2, "%s: opts.normalise must be \"shared\" or \"each\", got %s", fname,
               check.value(norm))
  end
  local H, W = img.shape[2], img.shape[3]
  local gh, gw = grid_of(opts.grid, H, W, T > 0 and alphas.shape[2] or 0)
  if math.type(gh) ~= "integer" or math.type(gw) ~= "integer" then
    check.fail(2, "%s: no attention grid for a %dx%d image: %s", fname, H, W, tostring(gw))
  end
  if T > 0 and (gh or 0) * (gw or 0) ~= alphas.shape[2] then
    check.fail(2, "%s: alphas have %d columns, a %dx%d image gives a %dx%d grid", fname,
               alphas.shape[2], H, W, gh or 0, gw or 0)
  end
  local scale, blend, cmap = opts.scale or M.SCALE, opts.alpha or 0.6, opts.colormap or "viridis"
  local rgb = img
  if img.shape[1] == 1 then rgb = glimpse.cat({img, img, img}, 1) end
  if img.shape[1] == 4 then rgb = img:narrow(1, 1, 3) end
  local big = image.resize(rgb, H * scale, W * scale, {filter = "nearest"})
  local label_h = viz.text_height(1) + 6
  local function labelled(pic, text)
    local panel = glimpse.cat({pic, glimpse.ones(3, label_h, W * scale)}, 2)
    local x = math.max(0, (W * scale - viz.text_width(text, 1)) // 2)
    return viz.draw_text(panel, text, x, H * scale + 3, {scale = 1})
  end
  local vmax = T > 0 and math.max(alphas:max():item(), 1e-12) or 1
  local panels = {labelled(big, opts.title or "image")}
  for t = 1, T do
    local heat = alphas[t]:reshape(gh, gw)
    local over
    if norm == "each" then
      over = image.overlay(big, heat, {alpha = blend, colormap = cmap})
    else
      local colour = image.heatmap(heat, {colormap = cmap, vmin = 0, vmax = vmax})   -- (3,gh,gw)
      colour = image.resize(colour, H * scale, W * scale, {filter = "bilinear"})
      over = big * (1 - blend) + colour * blend
    end
    panels[#panels + 1] = labelled(over, words[t])
  end
  local ncol = opts.ncol or math.max(1, (M.PAGE_WIDTH - 2) // (W * scale + 2))
  if math.type(ncol) ~= "integer" or ncol < 1 then
    check.fail(2, "%s: opts.ncol must be a positive integer, got %s", fname, check.value(opts.ncol))
  end
  local strip = image.grid(panels, {ncol = math.min(ncol, #panels), padding = 2, pad_value = 1})
  local bar = T > 0 and M.colour_bar(strip.shape[3], norm == "each" and 1 or vmax, cmap,
                                     norm == "each" and "each map: its min .. max" or "weight")
  if bar then strip = glimpse.cat({strip, bar}, 2) end
  image.save(path, strip)
  return path
end

--- caption_plot.colour_bar(width, vmax, colormap, label) -> a (3,22,width) legend: the
--- colour map from 0 to vmax with both ends and the label written; nil when width is
--- under 100 px
function M.colour_bar(width, vmax, cmap, label)
  local image = glimpse.image
  local left, bw = 14, math.min(200, width - 80)
  if bw < 20 then return nil end
  local ramp = {}
  for k = 1, bw do ramp[k] = (k - 1) / (bw - 1) end
  local bar = image.heatmap(glimpse.tensor({ramp}), {colormap = cmap, vmin = 0, vmax = 1})
  bar = image.resize(bar, 10, bw, {filter = "nearest"})
  local row = glimpse.cat({glimpse.ones(3, 10, left), bar, glimpse.ones(3, 10, width - left - bw)}, 3)
  local out = glimpse.cat({glimpse.ones(3, 2, width), row, glimpse.ones(3, 10, width)}, 2)
  out = viz.draw_text(out, "0", 4, 3, {scale = 1})
  local top = string.format("%.2g", vmax)
  out = viz.draw_text(out, top, left + bw + 3, 3, {scale = 1})
  local lx = left + bw + 3 + viz.text_width(top, 1) + 8
  if label and lx + viz.text_width(label, 1) <= width then
    out = viz.draw_text(out, label, lx, 3, {scale = 1})
  end
  return out
end

return M
