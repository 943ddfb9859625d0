--- glimpse.lab.viewer -- the attention viewer of report pages (page:attention): its input
-- table checked and made plain, and its HTML, CSS and JavaScript, all inline so that a page
-- works offline from the file.
--
-- The input (report.md#the-attention-viewer documents it):
--   {src = {"a", "b", "c"},                  -- source tokens (columns); optional with image
--    tgt = {"x", "y"},                       -- output tokens (rows)
--    maps = {{name = "decoder.layers.2.cross_attn", heads = 4, map = (4,T,S)},
--            {name = "last layer", map = (T,S)}},   -- nested tables or tensors
--    chosen = {3, 1},                        -- optional: the source position each output
--                                            -- step chose (pointer, hard attention)
--    chosen_label = "chosen",                -- optional: what the outlined cell means
--    image = {path = "image_1.png", grid = {gh, gw}},   -- optional: the source is an image
--                                            -- seen as a gh x gw grid (S = gh * gw)
--    vmax = 1}                               -- optional: the top of the colour scale
--                                            -- (default 1; over an image the largest weight)
local check = require "glimpse.check"
local glimpse = require "glimpse"
local util = require "glimpse.util"

local M = {}

local fail = check.fail

local function plain(v)
  if glimpse.is_tensor(v) then return v:detach():totable() end
  return v
end

local function round(x)
  if type(x) ~= "number" or x ~= x then return 0 end
  return math.floor(x * 1e4 + 0.5) / 1e4
end

local function tokens(list, what, fn, level)
  if type(list) == "string" then
    local out = {}
    for k = 1, #list do out[k] = list:sub(k, k) end
    return out
  end
  if type(list) ~= "table" then
    fail(level, "%s: %s must be a list of strings, got %s", fn, what, type(list))
  end
  local out = {}
  for k, v in ipairs(list) do out[k] = tostring(v) end
  return out
end

-- a map as (H,T,S) plain rows of rounded numbers; checks its sizes against T and S
local function heads_of(m, T, S, fn, i, level)
  local map = plain(m.map)
  if type(map) ~= "table" or type(map[1]) ~= "table" then
    fail(level, "%s: maps[%d].map must be a (T,S) or (heads,T,S) table or tensor, got %s", fn,
         i, check.shape(m.map))
  end
  if type(map[1][1]) ~= "table" then map = {map} end
  local H = #map
  if m.heads ~= nil and m.heads ~= H then
    fail(level, "%s: maps[%d] says heads = %s but its map has %d", fn, i, tostring(m.heads), H)
  end
  local out = {}
  for h = 1, H do
    local rows = map[h]
    if #rows ~= T then
      fail(level, "%s: maps[%d] (%s) has %d rows for %d output tokens", fn, i,
           tostring(m.name), #rows, T)
    end
    out[h] = {}
    for t = 1, T do
      local row = rows[t]
      if type(row) ~= "table" or #row ~= S then
        fail(level, "%s: maps[%d] (%s) row %d has %s columns for %d source positions", fn, i,
             tostring(m.name), t, type(row) == "table" and #row or "no", S)
      end
      local r = {}
      for s = 1, S do r[s] = round(row[s]) end
      out[h][t] = r
    end
  end
  return out, H
end

--- viewer.normalise(data, fn, level) -> the input as the page embeds it: tokens as strings,
--- every map (heads,T,S) plain rows rounded to 4 decimals, chosen 1-based, vmax filled in.
--- Bad input is an error naming fn.
function M.normalise(data, fn, level)
  fn, level = fn or "page:attention", (level or 1) + 1
  if type(data) ~= "table" then fail(level, "%s: data must be a table, got %s", fn, type(data)) end
  local tgt = tokens(data.tgt, "tgt", fn, level + 1)
  local img
  if data.image ~= nil then
    local im = data.image
    if type(im) ~= "table" or type(im.path) ~= "string" or type(im.grid) ~= "table"
       or math.type(im.grid[1]) ~= "integer" or math.type(im.grid[2]) ~= "integer" then
      fail(level, "%s: image must be {path = file, grid = {gh, gw}}", fn)
    end
    img = {path = im.path, grid = {im.grid[1], im.grid[2]}}
  end
  local src
  if data.src == nil and img then
    src = {}
    for r = 1, img.grid[1] do
      for c = 1, img.grid[2] do src[#src + 1] = string.format("(%d,%d)", r, c) end
    end
  else
    src = tokens(data.src, "src", fn, level + 1)
  end
  if img and #src ~= img.grid[1] * img.grid[2] then
    fail(level, "%s: %d source positions but the image grid is %dx%d", fn, #src, img.grid[1],
         img.grid[2])
  end
  if type(data.maps) ~= "table" or #data.maps == 0 then
    fail(level, "%s: maps must be a non-empty list of {name=, map=}", fn)
  end
  local maps, top = {}, 0
  for i, m in ipairs(data.maps) do
    if type(m) ~= "table" then fail(level, "%s: maps[%d] is a %s, expected a table", fn, i, type(m)) end
    local map, H = heads_of(m, #tgt, #src, fn, i, level + 1)
    for _, rows in ipairs(map) do
      for _, r in ipairs(rows) do for _, x in ipairs(r) do if x > top then top = x end end end
    end
    maps[i] = {name = tostring(m.name or ("map " .. i)), heads = H, map = map}
  end
  local chosen
  if data.chosen ~= nil then
    if type(data.chosen) ~= "table" then fail(level, "%s: chosen must be a list of positions", fn) end
    chosen = {}
    for t = 1, #tgt do
      local j = data.chosen[t]
      if j ~= nil and (math.type(j) ~= "integer" or j < 1 or j > #src) then
        fail(level, "%s: chosen[%d] = %s is not a source position 1..%d", fn, t, tostring(j), #src)
      end
      chosen[t] = j or 0
    end
  end
  local vmax = data.vmax or (img and math.max(top, 1e-6) or math.max(top, 1))
  if type(vmax) ~= "number" or vmax <= 0 then fail(level, "%s: vmax must be a positive number", fn) end
  return {src = src, tgt = tgt, maps = maps, chosen = chosen, image = img, vmax = vmax,
          chosen_label = data.chosen_label and tostring(data.chosen_label) or "chosen"}
end

--- viewer.from_maps(maps [, b=1]) -> a list for data.maps from a table keyed by module path
--- (glimpse.attention.capture's result or any such table): each value a (B,heads,T,S) or
--- (B,T,S) tensor or nested table, of which example b is taken; sorted by name.
function M.from_maps(maps, b)
  b = b or 1
  if type(maps) ~= "table" then fail(2, "viewer.from_maps: expected a table of maps, got %s", type(maps)) end
  local names = {}
  for k in pairs(maps) do names[#names + 1] = k end
  table.sort(names, function(x, y) return tostring(x) < tostring(y) end)
  local out = {}
  for _, k in ipairs(names) do
    local v = maps[k]
    if glimpse.is_tensor(v) then v = v[b]:detach():totable() else v = v[b] end
    local heads = type(v) == "table" and type(v[1]) == "table" and type(v[1][1]) == "table"
                  and #v or 1
    out[#out + 1] = {name = tostring(k), heads = heads, map = v}
  end
  return out
end

-- ---------------------------------------------------------------------------------------
-- the page's part

local function esc(s)
  return (tostring(s):gsub("[&<>\"']", {["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;",
                                        ['"'] = "&quot;", ["'"] = "&#39;"}))
end

--- viewer.block(id, data, title) -> the HTML of one viewer: its JSON (with "</" escaped) in
--- a <script type="application/json"> block inside a div the script fills in
function M.block(id, data, title)
  local json = util.json_encode(data):gsub("</", "<\\/"):gsub("<!%-%-", "<\\!--")
  return string.format('<div class="gv" id="%s">%s<script type="application/json" ' ..
                       'class="gv-data">%s</script><noscript>The attention viewer needs ' ..
                       'JavaScript; the pictures below show the same maps.</noscript></div>',
                       esc(id), title and ("<h3>" .. esc(title) .. "</h3>") or "", json)
end

M.CSS = [[
.gv{margin:1em 0;padding:0.6em;border:1px solid #ddd;border-radius:4px;max-width:100%}
.gv-controls{display:flex;flex-wrap:wrap;gap:0.8em;align-items:center;margin-bottom:0.5em;font-size:0.9em}
.gv-toks{display:flex;flex-wrap:wrap;gap:2px;margin:0.2em 0 0.6em 0;font-family:monospace}
.gv-toks span{padding:1px 4px;border:1px solid #ccc;border-radius:3px;cursor:pointer;white-space:pre}
.gv-toks span.gv-on{outline:2px solid #d62728}
.gv-toks span.gv-pick{border-color:#d62728;border-width:2px}
.gv-label{font-size:0.8em;color:#555}
.gv-scroll{width:fit-content;max-width:100%;max-height:640px;overflow:auto;border:1px solid #eee}
.gv-grid{display:grid;font-family:monospace;font-size:11px}
.gv-grid div{overflow:hidden;white-space:nowrap}
.gv-cell{width:18px;height:18px}
.gv-cell.gv-row{box-shadow:inset 0 0 0 1px #fff}
.gv-cell.gv-pick{box-shadow:inset 0 0 0 2px #d62728}
.gv-col{writing-mode:vertical-rl;transform:rotate(180deg);text-align:left;max-height:90px;width:18px;line-height:18px}
.gv-rowl{text-align:right;padding-right:4px;max-width:140px;height:18px;line-height:18px;cursor:pointer;position:sticky;left:0;background:#fff}
.gv-rowl.gv-on{background:#fde0dc}
.gv-legend{display:flex;align-items:center;gap:6px;font-size:0.8em;margin:0.4em 0}
.gv-legend canvas{width:160px;height:12px;border:1px solid #999}
.gv-heads{display:flex;flex-wrap:wrap;gap:10px;margin-top:0.5em}
.gv-heads figure{margin:0;cursor:pointer}
.gv-heads figure.gv-on canvas{outline:2px solid #d62728}
.gv-heads canvas{image-rendering:pixelated;border:1px solid #ccc;max-width:100%}
.gv-image,.gv-box{position:relative;background-size:100% 100%;image-rendering:pixelated}
.gv-image{width:320px;max-width:100%}
.gv-image svg,.gv-thumb svg{position:absolute;left:0;top:0;width:100%;height:100%}
.gv-strip{display:flex;flex-wrap:wrap;gap:8px;margin-top:0.5em}
.gv-thumb{position:relative;width:128px;cursor:pointer}
.gv-thumb .gv-box{position:relative}
.gv-thumb.gv-on{outline:2px solid #d62728}
.gv-thumb figcaption{text-align:center;font-family:monospace}
]]

M.JS = [==[
(function(){
"use strict";
var V=[[68,1,84],[72,40,120],[62,74,137],[49,104,142],[38,130,142],[31,158,137],[53,183,121],[109,205,89],[180,222,44],[253,231,37]];
function colour(v){v=v<0?0:(v>1?1:v);var x=v*(V.length-1),i=Math.floor(x),f=x-i;
  if(i>=V.length-1){i=V.length-2;f=1;}var a=V[i],b=V[i+1],c=[0,0,0];
  for(var k=0;k<3;k++)c[k]=Math.round(a[k]+(b[k]-a[k])*f);return "rgb("+c.join(",")+")";}
function ink(v){return v>0.6?"#000":"#fff";}
function el(tag,cls,text){var e=document.createElement(tag);if(cls)e.className=cls;
  if(text!==undefined)e.textContent=text;return e;}
var SVG="http://www.w3.org/2000/svg";
function init(root){
  var d=JSON.parse(root.querySelector("script.gv-data").textContent);
  var T=d.tgt.length,S=d.src.length,layer=0,head=-1,row=-1,col=-1,pinned=false;
  function current(){var m=d.maps[layer];if(m.heads===1)return m.map[0];
    if(head>=0)return m.map[head];var out=[];
    for(var t=0;t<T;t++){var r=[];for(var s=0;s<S;s++){var x=0;
      for(var h=0;h<m.heads;h++)x+=m.map[h][t][s];r.push(x/m.heads);}out.push(r);}return out;}
  var ctl=el("div","gv-controls");root.appendChild(ctl);
  var lsel,hsel;
  if(d.maps.length>1){var l=el("label",null,"map ");lsel=el("select","gv-layer");
    d.maps.forEach(function(m,i){var o=el("option",null,m.name);o.value=i;lsel.appendChild(o);});
    l.appendChild(lsel);ctl.appendChild(l);lsel.onchange=function(){layer=+lsel.value;head=-1;heads();draw();};}
  var hl=el("label",null,"head ");hsel=el("select","gv-head");hl.appendChild(hsel);ctl.appendChild(hl);
  hsel.onchange=function(){head=+hsel.value;draw();};
  var name=el("span","gv-label");ctl.appendChild(name);
  var legend=el("div","gv-legend");var bar=el("canvas");bar.width=160;bar.height=1;
  var bc=bar.getContext("2d");for(var i=0;i<160;i++){bc.fillStyle=colour(i/159);bc.fillRect(i,0,1,1);}
  legend.appendChild(el("span",null,"0"));legend.appendChild(bar);
  legend.appendChild(el("span",null,(+d.vmax.toPrecision(3))+""));
  if(d.chosen)legend.appendChild(el("span","gv-label","red outline: "+d.chosen_label));
  ctl.appendChild(legend);
  root.appendChild(el("div","gv-label","outputs (hover or click one: its weights over the source)"));
  var outs=el("div","gv-toks gv-tgt");root.appendChild(outs);
  var tgtEls=d.tgt.map(function(w,t){var e=el("span",null,w);e.dataset.i=t;outs.appendChild(e);return e;});
  var srcEls=[],cells=[],rowLabels=[],overlay=[],thumbs=[];
  if(d.image){
    var gh=d.image.grid[0],gw=d.image.grid[1],url="url("+JSON.stringify(d.image.path)+")",boxes=[];
    function pic(e){e.style.backgroundImage=url;e.style.aspectRatio=gw+"/"+gh;boxes.push(e);return e;}
    var box=pic(el("div","gv-image"));box.setAttribute("role","img");box.setAttribute("aria-label","image");
    var probe=new Image();probe.onload=function(){root.dataset.img=probe.naturalWidth;
      boxes.forEach(function(b){b.style.aspectRatio=probe.naturalWidth+"/"+probe.naturalHeight;});};
    probe.src=d.image.path;
    function grid(parent,list){var svg=document.createElementNS(SVG,"svg");
      svg.setAttribute("viewBox","0 0 "+gw+" "+gh);svg.setAttribute("preserveAspectRatio","none");
      for(var s=0;s<S;s++){var r=document.createElementNS(SVG,"rect");
        r.setAttribute("x",s%gw);r.setAttribute("y",Math.floor(s/gw));r.setAttribute("width",1);
        r.setAttribute("height",1);r.setAttribute("fill-opacity",0);r.setAttribute("stroke-width",0.08);
        r.setAttribute("class","gv-src");r.dataset.j=s;svg.appendChild(r);list.push(r);}
      parent.appendChild(svg);}
    grid(box,overlay);root.appendChild(box);
    var strip=el("div","gv-strip");root.appendChild(strip);
    d.tgt.forEach(function(w,t){var f=el("figure","gv-thumb");f.dataset.i=t;var b=pic(el("div","gv-box"));
      var list=[];grid(b,list);
      f.appendChild(b);f.appendChild(el("figcaption",null,w));strip.appendChild(f);thumbs.push({f:f,r:list});
      f.onclick=function(){pin(t);};});
  }else{
    root.appendChild(el("div","gv-label","source (hover one: its weights over the outputs)"));
    var srcs=el("div","gv-toks gv-src-toks");root.appendChild(srcs);
    srcEls=d.src.map(function(w,s){var e=el("span",null,w);e.dataset.j=s;srcs.appendChild(e);return e;});
    var sc=el("div","gv-scroll");var g=el("div","gv-grid");
    g.style.gridTemplateColumns="max-content repeat("+S+",18px)";
    g.appendChild(el("div"));
    d.src.forEach(function(w){g.appendChild(el("div","gv-col",w));});
    for(var t=0;t<T;t++){var lab=el("div","gv-rowl",d.tgt[t]);lab.dataset.i=t;g.appendChild(lab);rowLabels.push(lab);
      var r=[];for(var s=0;s<S;s++){var c=el("div","gv-cell");c.dataset.i=t;c.dataset.j=s;g.appendChild(c);r.push(c);}
      cells.push(r);}
    sc.appendChild(g);root.appendChild(sc);
    g.addEventListener("mouseover",function(ev){var x=ev.target;if(x.dataset.i!==undefined&&!pinned)show(+x.dataset.i);});
    g.addEventListener("click",function(ev){var x=ev.target;if(x.dataset.i!==undefined)pin(+x.dataset.i);});
    srcs.addEventListener("mouseover",function(ev){var x=ev.target;if(x.dataset.j!==undefined)back(+x.dataset.j);});
  }
  var hv=el("div","gv-heads");root.appendChild(hv);
  outs.addEventListener("mouseover",function(ev){var x=ev.target;if(x.dataset.i!==undefined&&!pinned)show(+x.dataset.i);});
  outs.addEventListener("click",function(ev){var x=ev.target;if(x.dataset.i!==undefined)pin(+x.dataset.i);});
  function pin(t){if(pinned&&row===t){pinned=false;return;}pinned=true;show(t);}
  function heads(){var m=d.maps[layer];hsel.innerHTML="";
    var o=el("option",null,m.heads>1?"mean of "+m.heads+" heads":"1 head");o.value=-1;hsel.appendChild(o);
    for(var h=0;h<m.heads&&m.heads>1;h++){o=el("option",null,"head "+(h+1));o.value=h;hsel.appendChild(o);}
    hsel.value=head;hsel.disabled=m.heads===1;hv.innerHTML="";
    if(m.heads<2||d.image)return;
    var px=Math.max(2,Math.min(8,Math.floor(200/Math.max(S,T))));
    for(h=0;h<m.heads;h++)(function(h){var f=el("figure");var cv=el("canvas");cv.width=S;cv.height=T;
      cv.style.width=(S*px)+"px";cv.style.height=(T*px)+"px";var c2=cv.getContext("2d");
      for(var t=0;t<T;t++)for(var s=0;s<S;s++){c2.fillStyle=colour(m.map[h][t][s]/d.vmax);c2.fillRect(s,t,1,1);}
      f.appendChild(cv);f.appendChild(el("figcaption",null,"head "+(h+1)));f.dataset.h=h;
      f.onclick=function(){head=head===h?-1:h;hsel.value=head;draw();};hv.appendChild(f);})(h);}
  function paint(e,w){e.style.background=colour(w/d.vmax);e.style.color=ink(w/d.vmax);e.dataset.w=w.toFixed(4);}
  function clear(e){e.style.background="";e.style.color="";delete e.dataset.w;}
  function draw(){var a=current(),m=d.maps[layer];
    name.textContent=m.name+(m.heads>1?(head<0?" (mean of heads)":" (head "+(head+1)+")"):"");
    Array.prototype.forEach.call(hv.children,function(f){f.classList.toggle("gv-on",+f.dataset.h===head);});
    for(var t=0;t<cells.length;t++)for(var s=0;s<S;s++){var c=cells[t][s],w=a[t][s];
      c.style.background=colour(w/d.vmax);c.dataset.w=w.toFixed(4);c.title=d.tgt[t]+" \u2192 "+d.src[s]+": "+w.toFixed(4);
      c.classList.toggle("gv-pick",!!(d.chosen&&d.chosen[t]===s+1));}
    thumbs.forEach(function(th,t){th.r.forEach(function(r,s){fill(r,a[t][s],d.chosen&&d.chosen[t]===s+1);});});
    if(row>=0)show(row);else if(col>=0)back(col);}
  function fill(r,w,pick){r.setAttribute("fill",colour(w/d.vmax));r.setAttribute("fill-opacity",(0.85*Math.min(1,w/d.vmax)).toFixed(3));
    r.dataset.w=w.toFixed(4);r.setAttribute("stroke",pick?"#d62728":"none");}
  function show(t){var a=current();row=t;col=-1;root.dataset.row=t;delete root.dataset.col;
    tgtEls.forEach(function(e,i){clear(e);e.classList.toggle("gv-on",i===t);});
    rowLabels.forEach(function(e,i){e.classList.toggle("gv-on",i===t);});
    cells.forEach(function(r,i){r.forEach(function(c){c.classList.toggle("gv-row",i===t);});});
    srcEls.forEach(function(e,s){paint(e,a[t][s]);e.classList.toggle("gv-pick",!!(d.chosen&&d.chosen[t]===s+1));});
    overlay.forEach(function(r,s){fill(r,a[t][s],d.chosen&&d.chosen[t]===s+1);});
    thumbs.forEach(function(th,i){th.f.classList.toggle("gv-on",i===t);});}
  function back(s){var a=current();col=s;row=-1;pinned=false;root.dataset.col=s;delete root.dataset.row;
    srcEls.forEach(function(e,j){clear(e);e.classList.toggle("gv-on",j===s);e.classList.remove("gv-pick");});
    tgtEls.forEach(function(e,t){e.classList.remove("gv-on");paint(e,a[t][s]);});}
  heads();draw();show(0);
}
var all=document.querySelectorAll(".gv");for(var i=0;i<all.length;i++){
  try{init(all[i]);all[i].dataset.ready="1";}catch(e){all[i].dataset.error=String(e);}}
})();
]==]

return M
