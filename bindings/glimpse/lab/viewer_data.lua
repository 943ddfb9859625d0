--- glimpse.lab.viewer_data -- the attention viewer's input (glimpse.lab.viewer) made from what
-- the models give: a seq2seq decode (Seq2Seq or Transformer extras.alignments), a pointer
-- network's distributions with its chosen points, compare's records, a captioner's maps over
-- its image grid.  The scripts add their pages' viewers through these.
local glimpse = require "glimpse"
local figures = require "glimpse.plot.figures"

local M = {}

--- viewer_data.seq2seq(ds, item, {name=}) -> viewer data: item = {index=, ids=, alignment=}
--- as figures.seq2seq_alignments takes (the source characters, the predicted tokens and
--- <end>, the decoder's attention rows; name: the map's name)
function M.seq2seq(ds, item, opts)
  local rows, src, tgt = figures.seq2seq_rows(ds, item)
  return {src = src, tgt = tgt,
          maps = {{name = (opts or {}).name or "decoder attention", map = rows}}}
end

--- viewer_data.add_seq2seq(page, ds, items, {title=, name=, pictures=}) adds one viewer per
--- item (a decode's examples) to a report page; pictures: the static files, linked under the
--- first.  Returns the page.
function M.add_seq2seq(page, ds, items, opts)
  opts = opts or {}
  for k, it in ipairs(items) do
    if it.alignment and #it.alignment > 0 then
      page:attention(M.seq2seq(ds, it, opts), {
        title = string.format("%s: example %d%s", opts.title or "attention", k,
                              it.ok == nil and "" or (it.ok and " (correct)" or " (wrong)")),
        pictures = k == 1 and opts.pictures or nil})
    end
  end
  return page
end

-- example b's rows 1..T and columns 1..S of a (B,heads,T',S') capture, as (heads,T,S) tables
local function head_rows(map, b, T, S)
  return map[b]:narrow(2, 1, T):narrow(3, 1, S):detach():totable()
end

--- viewer_data.transformer(model, ds, index) -> a list of {title=, data=}: every attention
--- map of a models.Transformer (or any model whose alignments(batch) runs its layers) on
--- example `index` of ds under teacher forcing, captured by glimpse.attention.capture and
--- keyed by module path: the decoder's cross-attention (targets over the source), its
--- self-attention (targets over targets) and the encoder's (source over source), each with
--- every layer in the map selector and every head in the head selector.
function M.transformer(model, ds, index)
  local capture = require("glimpse.attention").capture
  local batch = ds:collate({index})
  local maps = capture(function() return model:alignments(batch) end, model)
  local src = {}
  for ch in ds.src[index]:gmatch(".") do src[#src + 1] = ch == " " and "_" or ch end
  local tgt = {}
  for _, id in ipairs(batch.tgt_out[1]:totable()) do
    if id ~= 0 then tgt[#tgt + 1] = ds.tgt_vocab:token(math.tointeger(id)) end
  end
  local groups = {
    {title = "decoder cross-attention (outputs over the source)", field = "multihead_attn",
     rows = tgt, cols = src},
    {title = "decoder self-attention (outputs over earlier outputs)", field = "decoder.*self_attn",
     rows = tgt, cols = tgt},
    {title = "encoder self-attention (source over source)", field = "encoder.*self_attn",
     rows = src, cols = src},
  }
  local out = {}
  for _, g in ipairs(groups) do
    local list = {}
    for _, key in ipairs(capture.keys(maps)) do
      local m = maps[key]
      if key:find(g.field) and glimpse.is_tensor(m) and m:dim() == 4
         and m.shape[3] >= #g.rows and m.shape[4] >= #g.cols then
        list[#list + 1] = {name = key, heads = m.shape[2], map = head_rows(m, 1, #g.rows, #g.cols)}
      end
    end
    if #list > 0 then
      out[#out + 1] = {title = g.title, data = {src = g.cols, tgt = g.rows, maps = list, vmax = 1}}
    end
  end
  return out
end

--- viewer_data.pointer(alignment, pred, n [, title]) -> viewer data: the pointer's
--- distribution per output step over the end slot and the n points, the chosen point outlined
function M.pointer(alignment, pred, n, title)
  local src = {"end"}
  for j = 1, n do src[j + 1] = tostring(j) end
  local tgt, rows, chosen = {}, {}, {}
  for t, row in ipairs(alignment) do
    rows[t] = table.move(row, 1, n + 1, 1, {})
    tgt[t] = pred[t] and tostring(pred[t]) or "end"
    chosen[t] = pred[t] and pred[t] + 1 or 1
  end
  return {src = src, tgt = tgt, maps = {{name = "pointer", map = rows}}, chosen = chosen,
          chosen_label = "the point chosen", vmax = 1, title = title}
end

--- viewer_data.compare(records) -> a list of {title=, data=}: the heatmap records of one
--- task (each {mechanism=, heatmap = {alpha, src, tgt}}), one viewer whose map selector
--- names the mechanisms when they share their tokens (the same test example), else one each
function M.compare(records)
  local groups, order = {}, {}
  for _, rec in ipairs(records) do
    local h = rec.heatmap
    if h and h.alpha and #h.alpha > 0 then
      local key = table.concat(h.src, "\1") .. "\2" .. table.concat(h.tgt, "\1")
      if not groups[key] then
        groups[key] = {src = h.src, tgt = h.tgt, maps = {}, vmax = 1}
        order[#order + 1] = key
      end
      table.insert(groups[key].maps, {name = rec.mechanism, map = h.alpha})
    end
  end
  local out = {}
  for _, key in ipairs(order) do
    local g = groups[key]
    out[#out + 1] = {data = g, title = #g.maps > 1 and "every mechanism on one test example"
                     or g.maps[1].name}
  end
  return out
end

--- viewer_data.caption(words, alphas (T,L), image_path, grid {gh, gw}, {hard=false}) ->
--- viewer data for one caption: the words as outputs, the maps over the image's grid cells;
--- the chosen cell is each word's largest weight (with hard attention: the sampled cell
--- when the maps are one-hot)
function M.caption(words, alphas, path, grid, opts)
  local list = type(words) == "table" and words or {}
  if type(words) == "string" then for w in words:gmatch("%S+") do list[#list + 1] = w end end
  local rows = glimpse.is_tensor(alphas) and alphas:totable() or alphas
  local chosen = {}
  for t, r in ipairs(rows) do
    local best = 1
    for j = 2, #r do if r[j] > r[best] then best = j end end
    chosen[t] = best
  end
  return {tgt = list, maps = {{name = "attention over the image", map = rows}}, chosen = chosen,
          chosen_label = (opts or {}).hard and "the attended (sampled) cell" or "the largest weight",
          image = {path = path, grid = grid}}
end

--- viewer_data.add_captions(page, cap, set, r, dir, n) adds a viewer for each of the first
--- n test captions (r: caption_eval.test's result; the images are written into dir as
--- image_<i>.png).  Returns the page.
function M.add_captions(page, cap, set, r, dir, n)
  local spec = cap.config.image or {}
  if math.min(n or 4, set.n) > 0 then
    page:heading("Where each word looked")
    page:paragraph("Hover or click a word: its weights over the image grid (brighter and " ..
                   "more opaque: more weight); the strip under the image shows every word.")
  end
  for i = 1, math.min(n or 4, set.n) do
    local img, a = set.display(i), r.alphas[i]
    if img:dim() == 3 and glimpse.is_tensor(a) and a:dim() == 2 and a.shape[1] > 0 then
      local name = string.format("image_%d.png", i)
      glimpse.image.save(dir .. "/" .. name, img)
      local gh, gw = cap:grid_size(spec.height or img.shape[2], spec.width or img.shape[3])
      page:attention(M.caption(r.words[i], r.alphas[i], name, {gh, gw},
                               {hard = cap.config.attention == "hard"}),
                     {title = string.format("%d. %s", i, r.words[i]),
                      pictures = {string.format("overlay_%d.png", i)}})
    end
  end
  return page
end

return M
