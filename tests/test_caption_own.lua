-- tests/test_caption_own.lua -- a captioner from one's own pictures: a folder of images and
-- a captions file (TSV "file<TAB>caption[<TAB>split]" or Karpathy JSON) trained by
-- `scripts/caption.lua --images DIR --captions FILE`, then `glimpse caption --model PATH`
-- captions with the result (docs/experiments/caption.md, "Your own pictures").
local lu = require "luaunit"
local glimpse = require "glimpse"
local H = require "tests.helpers"
local util = glimpse.util

local T = {}

local EXE = arg and arg[-1] or "build/glimpse"

-- run a command line; ok, stdout and stderr together
local function sh(line)
  local p = io.popen(line .. " 2>&1")
  local out = p:read("a")
  return p:close(), out
end

-- 10 grey 16x16 pictures: a bright square on the left or the right, large or small
local function write_corpus(d)
  util.mkdir_p(d .. "/pics")
  local lines = {"# file\tcaption\tsplit (optional)"}
  for i = 1, 10 do
    local left, big = i % 2 == 1, i % 4 < 2
    local img = glimpse.zeros(1, 16, 16)
    local s = big and 8 or 4
    local x0 = left and 2 or 16 - s - 1
    img:narrow(2, 5, s):narrow(3, x0, s):fill_(0.9)
    local name = string.format("p%02d.png", i)
    glimpse.image.save(d .. "/pics/" .. name, img)
    local side, size = left and "left" or "right", big and "big" or "small"
    lines[#lines + 1] = string.format("%s\ta %s square on the %s%s", name, size, side,
                                      i == 3 and "\ttrain" or "")
    lines[#lines + 1] = string.format("%s\tthe square is on the %s", name, side)
  end
  util.write_text(d .. "/captions.tsv", table.concat(lines, "\n") .. "\n")
end

function T.test_a_folder_with_a_tsv_trains_a_captioner_that_glimpse_caption_uses()
  local d = H.tmpdir()
  write_corpus(d)
  local ok, out = sh(string.format("%s scripts/caption.lua --images %s --captions %s " ..
    "--image-size 16 --min-count 1 --steps 30 --batch 4 --channels 4,8 --embed 8 " ..
    "--hidden 16 --att 8 --overlays 0 --beam 2 --threads 1 --out %s", H.sh_quote(EXE),
    H.sh_quote(d .. "/pics"), H.sh_quote(d .. "/captions.tsv"), H.sh_quote(d .. "/run")))
  lu.assertTrue(ok, out)
  lu.assertStrContains(out, "own: 16 train / 1 valid / 1 test")   -- captions: 2 a picture
  local cap = glimpse.captioner.load(d .. "/run/model.safetensors")
  -- the vocabulary is the captions' words; the pictures' size and channels are the model's
  local vocab = cap.vocab:totable()
  table.sort(vocab)
  lu.assertEquals(vocab, {"<end>", "<pad>", "<start>", "<unk>", "a", "big", "is", "left",
                          "on", "right", "small", "square", "the"})
  lu.assertEquals({cap:input_shape()}, {1, 16, 16})
  lu.assertStrContains(cap.description, "16x16 grey pictures of the folder " .. d .. "/pics")
  lu.assertEquals(cap.familiar_summary.n, 8)
  -- glimpse caption --model PATH captions a picture of the folder with it
  local ok2, line = sh(string.format("%s caption --model %s %s", H.sh_quote(EXE),
                                     H.sh_quote(d .. "/run/model.safetensors"),
                                     H.sh_quote(d .. "/pics/p10.png")))
  lu.assertTrue(ok2, line)
  lu.assertEquals(line, d .. "/pics/p10.png\t" .. cap:caption(d .. "/pics/p10.png") .. "\n")
  H.rmdir(d)
end

function T.test_tsv_reading_splits_and_errors()
  local captions = glimpse.data.captions
  local d = H.tmpdir()
  util.write_text(d .. "/c.tsv", "a.png\tA red dot.\n\n# comment\nb.png\tone\ttest\n" ..
                                 "a.png\ta dot\r\n")
  local set = captions.load_file(d .. "/c.tsv")
  lu.assertEquals(set:size(), 2)
  lu.assertEquals(set.images[1].captions, {{"a", "red", "dot"}, {"a", "dot"}})
  lu.assertEquals(set.images[2].split, "test")
  lu.assertNil(set.images[1].split)
  set:default_splits()
  lu.assertEquals(set.images[1].split, "train")
  util.write_text(d .. "/bad.tsv", "a.png\tfine\nno tab here\n")
  local ok, err = pcall(captions.load_file, d .. "/bad.tsv")
  lu.assertFalse(ok)
  lu.assertStrContains(err, "load_tsv: '" .. d .. "/bad.tsv' line 2 is not")
  util.write_text(d .. "/split.tsv", "a.png\tfine\tlater\n")
  ok, err = pcall(captions.load_file, d .. "/split.tsv")
  lu.assertFalse(ok)
  lu.assertStrContains(err, 'split must be train, val or test, got "later"')
  -- a Karpathy JSON file is read by the same call
  util.write_text(d .. "/k.json", '{"images": [{"filename": "a.png", "split": "val", ' ..
                                  '"sentences": [{"raw": "Two cats."}]}]}')
  local k = captions.load_file(d .. "/k.json")
  lu.assertEquals(k.images[1].captions, {{"two", "cats"}})
  H.rmdir(d)
end

return T
