--- glimpse.data.Vocab (glimpse.data.vocab) -- token vocabularies shared by the sequence and caption datasets.
--
-- Ids are 1-based and the four specials always come first, in this order:
--   1 <pad>   2 <start>   3 <end>   4 <unk>
-- so a padded batch is filled with 1 (use ignore_index = 1 in cross_entropy, or the mask), a
-- decoder starts from 2 and stops at 3, and an unknown token maps to 4.  The remaining ids
-- follow the order the vocabulary was built in (by count for captions, fixed for tasks).
--
--   local Vocab = require "glimpse.data.vocab"
--   local v = Vocab.new({"a", "b"})            -- ids: a=5, b=6
--   v:encode({"a", "b", "z"}, {start=true, stop=true})  --> {2, 5, 6, 4, 3}
--   v:decode({2, 5, 6, 3, 1, 1})                         --> {"a", "b"}
local M = {}

M.PAD, M.START, M.END, M.UNK = 1, 2, 3, 4
M.SPECIALS = {"<pad>", "<start>", "<end>", "<unk>"}

local Vocab = {}
Vocab.__index = Vocab
Vocab.__len = function(v) return #v.itos end
M.Vocab = Vocab

--- Vocab.new(tokens) -> vocab with the specials (ids 1..4) then tokens (ids 5..).  A token
--- listed twice, or one spelled like a special, is an error.
function M.new(tokens)
  if type(tokens) ~= "table" then error("vocab.new: a list of tokens expected", 2) end
  local v = setmetatable({itos = {}, stoi = {}}, Vocab)
  v.pad, v.start, v.stop, v.unk = M.PAD, M.START, M.END, M.UNK
  for i, s in ipairs(M.SPECIALS) do
    v.itos[i], v.stoi[s] = s, i
  end
  for _, t in ipairs(tokens) do
    if type(t) ~= "string" then error("vocab.new: tokens must be strings, got " .. type(t), 2) end
    if v.stoi[t] then error("vocab.new: token '" .. t .. "' appears twice", 2) end
    v.itos[#v.itos + 1] = t
    v.stoi[t] = #v.itos
  end
  return v
end

--- Vocab.from_list(itos) -> vocab from a full id list as saved by v:totable() (specials first).
function M.from_list(itos)
  for i, s in ipairs(M.SPECIALS) do
    if itos[i] ~= s then
      error(string.format("vocab.from_list: entry %d is '%s', expected '%s'", i,
                          tostring(itos[i]), s), 2)
    end
  end
  return M.new(table.move(itos, #M.SPECIALS + 1, #itos, 1, {}))
end

--- Vocab.build(sequences, {min_count=1, max_size=nil}) -> vocab of the tokens occurring at
--- least min_count times in a list of token lists, most frequent first (ties alphabetical);
--- max_size caps the total size including the specials.  Also returns the counts table.
function M.build(sequences, opts)
  opts = opts or {}
  local min_count = opts.min_count or 1
  local counts, words = {}, {}
  for _, seq in ipairs(sequences) do
    for _, t in ipairs(seq) do
      if not counts[t] then words[#words + 1] = t end
      counts[t] = (counts[t] or 0) + 1
    end
  end
  local keep = {}
  for _, w in ipairs(words) do
    local special = false
    for _, s in ipairs(M.SPECIALS) do special = special or s == w end
    if counts[w] >= min_count and not special then keep[#keep + 1] = w end
  end
  table.sort(keep, function(a, b)
    if counts[a] ~= counts[b] then return counts[a] > counts[b] end
    return a < b
  end)
  if opts.max_size then
    local room = math.max(0, opts.max_size - #M.SPECIALS)
    for i = #keep, room + 1, -1 do keep[i] = nil end
  end
  return M.new(keep), counts
end

--- Vocab.chars(s) -> vocab whose tokens are the distinct characters of s, in order.
function M.chars(s)
  local seen, list = {}, {}
  for i = 1, #s do
    local c = s:sub(i, i)
    if not seen[c] then seen[c] = true; list[#list + 1] = c end
  end
  return M.new(list)
end

--- v:size() -> number of ids (specials included); #v is the same.
function Vocab:size() return #self.itos end

--- v:id(token) -> its id, or <unk>'s.
function Vocab:id(t) return self.stoi[t] or M.UNK end

--- v:token(id) -> its token string (an error for an id outside 1..size).
function Vocab:token(i)
  local t = self.itos[i]
  if not t then error(string.format("vocab: id %s outside 1..%d", tostring(i), #self.itos), 2) end
  return t
end

--- v:has(token) -> boolean.
function Vocab:has(t) return self.stoi[t] ~= nil end

--- v:encode(tokens, {start=false, stop=false, max_len=nil}) -> list of ids.  A string is split
--- into characters.  max_len caps the length counting the <start>/<end> added.
function Vocab:encode(tokens, opts)
  opts = opts or {}
  if type(tokens) == "string" then
    local s = tokens
    tokens = {}
    for i = 1, #s do tokens[i] = s:sub(i, i) end
  end
  local ids = {}
  if opts.start then ids[1] = M.START end
  local room = opts.max_len and (opts.max_len - (opts.stop and 1 or 0)) or math.huge
  for _, t in ipairs(tokens) do
    if #ids >= room then break end
    ids[#ids + 1] = self.stoi[t] or M.UNK
  end
  if opts.stop then ids[#ids + 1] = M.END end
  return ids
end

--- v:decode(ids, {keep_specials=false}) -> list of tokens.  Reads up to the first <end>,
--- dropping <pad> and <start> (unless keep_specials).  ids: a table or a 1-D tensor.
function Vocab:decode(ids, opts)
  opts = opts or {}
  if type(ids) ~= "table" then ids = ids:totable() end
  local out = {}
  for _, i in ipairs(ids) do
    i = math.tointeger(i) or error("vocab.decode: id " .. tostring(i) .. " is not an integer", 2)
    if not opts.keep_specials then
      if i == M.END then break end
      if i ~= M.PAD and i ~= M.START then out[#out + 1] = self:token(i) end
    else
      out[#out + 1] = self:token(i)
    end
  end
  return out
end

--- v:decode_string(ids [, sep=" "]) -> the decoded tokens joined by sep.
function Vocab:decode_string(ids, sep)
  return table.concat(self:decode(ids), sep or " ")
end

--- v:totable() -> the full id list (specials first), for saving in a checkpoint's metadata.
function Vocab:totable()
  return table.move(self.itos, 1, #self.itos, 1, {})
end

return M
