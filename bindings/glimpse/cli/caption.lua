--- glimpse.caption_cli -- `glimpse caption IMAGE... [--model NAME|PATH] [--beam K]
-- [--overlay DIR] [--resize]`: caption image files from the shell.
--
-- bindings/main.c hands the words after `caption` to main(args), whose result is the exit
-- status.  One line per image on stdout: the image's path, a tab, its caption.  An image
-- unlike the model's training images (Captioner:familiar) gets a warning on stderr after
-- its caption.  With --overlay, DIR/<image name>.png gets the strip of where each word
-- looked (Captioner:overlays), drawn on the picture as the model saw it (resized), after
-- the caption is printed.  A problem with one image (missing, not an image, a size the
-- model does not take, an overlay that cannot be written) is reported on stderr naming the
-- file, the other images are still captioned, and the exit status is 1; a problem with the
-- command line or the model stops at once (status 2 for the command line, 1 for the model).
-- The size rule is Captioner:caption's: an image of another size than the model's is an
-- error unless --resize (resize = true) is given; a file is read in the model's channels.
local glimpse = require "glimpse"

local M = {}

M.DEFAULT_MODEL = "scenes-soft"
local DEFAULT_BEAM = 3

M.USAGE = [[
usage: glimpse caption IMAGE... [--model NAME|PATH] [--beam K] [--overlay DIR] [--resize]
Print one caption per image: the image's path, a tab, the caption.
  --model NAME|PATH  a shipped model by name (glimpse.captioner.pretrained; default
                     scenes-soft) or a .safetensors file written by cap:save
  --beam K           beam width (1: greedy; default 3)
  --overlay DIR      write DIR/<image name>.png: the image as the model saw it (resized)
                     and where each word looked
  --resize           resize an image of another size than the model's (bilinear);
                     otherwise such an image is an error.  A file is read in the model's
                     channels (a colour file becomes grey for a grey model)
  -h, --help         show this help (with --model: that model's)
A model knows only the images it was trained on: any other picture still gets a caption
in its words, which then says nothing.  An image unlike its training images (colour,
background, ink, items, ...) gets a warning on stderr.]]

local function err(fmt, ...)
  io.stderr:write("glimpse caption: ", string.format(fmt, ...), "\n")
  io.stderr:flush()
end

-- the message of a Lua error without its "file:line:" position
local function clean(e)
  return (tostring(e):gsub("^[^\n:]*:%d+: ", ""))
end

--- caption_cli.parse(args) -> opts {images=, model=, beam=, overlay=, resize=, help=}, or
-- nil and the problem.
function M.parse(args)
  local o = {images = {}, model = M.DEFAULT_MODEL, beam = DEFAULT_BEAM, resize = false}
  local i = 1
  local function value(flag)
    local v = args[i + 1]
    if v == nil then return nil, flag .. " needs a value" end
    i = i + 1
    return v
  end
  local only_images = false
  while i <= #args do
    local a = args[i]
    if only_images or a:sub(1, 1) ~= "-" or a == "-" then
      o.images[#o.images + 1] = a
    elseif a == "--" then
      only_images = true
    elseif a == "-h" or a == "--help" then
      o.help = true
    elseif a == "--resize" then
      o.resize = true
    elseif a == "--model" or a == "--beam" or a == "--overlay" then
      local v, problem = value(a)
      if not v then return nil, problem end
      if a == "--beam" then
        local k = math.tointeger(tonumber(v))
        if not k or k < 1 then return nil, "--beam must be a positive integer, got " .. v end
        o.beam = k
      else
        o[a:sub(3)] = v
      end
    else
      return nil, "unknown option " .. a
    end
    i = i + 1
  end
  if not o.help and #o.images == 0 then return nil, "no images given" end
  return o
end

-- a PATH names a file (it has a '/' or ends in .safetensors); anything else is a NAME
local function load_model(spec)
  local cap = glimpse.captioner
  if spec:find("/", 1, true) or spec:match("%.safetensors$") then
    local kind = glimpse._file_kind(spec)
    if not kind then return nil, string.format("model %s: no such file", spec) end
    if kind ~= "file" then return nil, string.format("model %s: not a regular file", spec) end
    local ok, m = pcall(cap.load, spec)
    if not ok then return nil, string.format("model %s: %s", spec, clean(m)) end
    return m
  end
  local ok, m = pcall(cap.pretrained, spec)
  if not ok then return nil, clean(m) end
  return m
end

-- DIR/<name>.png for an image path, made unique within this run
local function overlay_path(dir, image, used)
  local base = (image:match("([^/]+)$") or "image"):gsub("%.[^.]*$", "")
  local path = dir .. "/" .. base .. ".png"
  local n = 1
  while used[path] do
    n = n + 1
    path = string.format("%s/%s-%d.png", dir, base, n)
  end
  used[path] = true
  return path
end

-- caption one file: prints its line and warnings; returns true, or nil and the problem
local function caption_one(cap, path, o, used)
  local kind = glimpse._file_kind(path)
  if not kind then return nil, "no such file" end
  if kind ~= "file" then return nil, kind == "directory" and "is a directory" or "not a regular file" end
  local C, H, W = cap:input_shape()
  local ok, img = pcall(glimpse.image.load, path, {channels = C})
  if not ok then return nil, "not an image (" .. clean(img) .. ")" end
  local h, w = img.shape[2], img.shape[3]
  if H and (h ~= H or w ~= W) and not o.resize then
    local c = img.shape[1]
    return nil, string.format("the image is %dx%d pixels (height x width, %d channel%s), " ..
                              "the model takes %sx%s (--resize converts it)", h, w, c,
                              c == 1 and "" or "s", tostring(H), tostring(W))
  end
  local okw, words, info = pcall(cap.caption, cap, path, {beam = o.beam, resize = o.resize,
                                                         maps = true, warn = false})
  if not okw then return nil, "the model cannot caption it: " .. clean(words) end
  io.write(path, "\t", words, "\n")
  io.stdout:flush()
  if info.familiar == false then
    err("warning: %s", cap:unfamiliar_note(info.reasons, path))
  end
  if o.overlay then
    local oko, e = pcall(cap.overlays, cap, info.image, info.alphas, words,
                         overlay_path(o.overlay, path, used))
    if not oko then return nil, "writing the overlay: " .. clean(e) end
  end
  return true
end

-- the help, with what the model (--model or the default) knows when it can be read
local function help_text(o)
  local text = M.USAGE
  local cap = load_model(o.model)
  if cap then
    text = text .. "\n\nWhat the model " .. o.model .. " knows:\n  " ..
           cap:about():gsub("\n", "\n  ")
  end
  return text
end

--- caption_cli.main(args) -> exit status: 0 when every image got a caption, 1 when an image
-- or the model failed, 2 for a bad command line.
function M.main(args)
  local o, problem = M.parse(args)
  if not o then
    err("%s", problem)
    io.stderr:write(M.USAGE, "\n")
    return 2
  end
  if o.help then
    print(help_text(o))
    return 0
  end
  local cap, why = load_model(o.model)
  if not cap then
    err("%s", why)
    return 1
  end
  if o.overlay then
    local ok, e = pcall(glimpse.util.mkdir_p, o.overlay)
    if not ok then
      err("--overlay %s: %s", o.overlay, clean(e))
      return 1
    end
  end
  local status, used = 0, {}
  for _, path in ipairs(o.images) do
    local done, bad = caption_one(cap, path, o, used)
    if not done then
      err("%s: %s", path, bad)
      status = 1
    end
  end
  return status
end

return M
