-- tests/test_caption_self_critical.lua -- self-critical sequence training (Rennie et al. 2017):
-- CIDEr-D with a fixed corpus's document frequencies (metrics.cider_scorer), the loss
-- -(r - b) log p(caption) of the captions the model samples (cap:self_critical_loss: its value
-- against the teacher-forced log-probabilities of its own samples, both baselines, a reward
-- it learns to follow), and scripts/caption.lua's --scst-steps.
local lu = require "luaunit"
local glimpse = require "glimpse"
local metrics = require "glimpse.metrics"
local Vocab = glimpse.data.Vocab
local H = require "tests.captioner_helpers"

local T = {}

local CASES = glimpse.util.read_json("tests/fixtures/caption_metrics.json")

function T.test_cider_scorer_is_cider_with_the_corpus_document_frequencies()
  for _, c in ipairs(CASES) do
    -- the corpus = the candidates' own references: the same df and N as metrics.cider
    local score = metrics.cider_scorer(c.references)
    local mean, per = score(c.candidates, c.references)
    lu.assertAlmostEquals(mean, c.cider, 1e-9, c.name)
    for i = 1, #per do
      lu.assertAlmostEquals(per[i], c.cider_scores[i], 1e-9, c.name)
      -- one candidate alone keeps its score: the df are the corpus's, not the call's
      local one, only = score({c.candidates[i]}, {c.references[i]})
      lu.assertAlmostEquals(one, c.cider_scores[i], 1e-9, c.name)
      lu.assertAlmostEquals(only[1], c.cider_scores[i], 1e-9, c.name)
    end
  end
  -- a larger corpus makes the shared words rarer: "a" is in every set, "bag" in one of three
  local corpus = {{"a bag"}, {"a coat"}, {"a shirt"}}
  local s3 = metrics.cider_scorer(corpus)({"a bag"}, {{"a bag"}})
  lu.assertTrue(s3 > 0)
  lu.assertEquals(metrics.cider({"a bag"}, {{"a bag"}}), 0)    -- alone, every idf is 0
  H.assert_error_matches({"metrics.cider_scorer", "corpus", "empty"}, metrics.cider_scorer, {})
  H.assert_error_matches({"metrics.cider_scorer", "sigma"}, metrics.cider_scorer, corpus,
                         {sigma = -1})
  H.assert_error_matches({"cider_scorer", "2 candidates but 1"},
                         metrics.cider_scorer(corpus), {"a", "b"}, {{"a"}})
end

local REFS = {{"a red circle"}, {"a blue square above a red circle"}, {"a square"}}

-- log p of each caption (a string) of images b (teacher forcing, evaluation mode)
local function log_probs(cap, images, captions, finished, K)
  local v = cap.vocab
  local cin, cout = {}, {}
  for i, s in ipairs(captions) do
    local ids = {Vocab.START}
    for w in s:gmatch("%S+") do ids[#ids + 1] = v:id(w) end
    if finished[i] then ids[#ids + 1] = Vocab.END end          -- cut off: no <end>
    cin[i] = table.move(ids, 1, #ids - 1, 1, {})
    cout[i] = table.move(ids, 2, #ids, 1, {})
  end
  local pad = glimpse.data.batches.pad
  local ci = pad(cin, {pad = Vocab.PAD})
  local co = pad(cout, {pad = Vocab.PAD})
  local rows = {}
  for i = 1, images.shape[1] do
    for _ = 1, K do rows[#rows + 1] = images[i] end
  end
  cap:evaluate()
  local out = glimpse.no_grad(function()
    local lp = glimpse.log_softmax(cap:forward(glimpse.stack(rows, 1), ci), 3)
    local res = {}
    for i = 1, #captions do
      local sum = 0
      for t = 1, #cout[i] do sum = sum + lp[i][t][cout[i][t]]:item() end
      res[i] = sum
    end
    return res
  end)
  cap:train()
  return out
end

function T.test_the_loss_is_minus_the_advantage_times_the_samples_log_probability()
  for _, attention in ipairs({"soft", "hard"}) do
    glimpse.manual_seed(3)
    local cap = H.tiny({attention = attention, max_len = 8})
    local images = glimpse.rand(3, 1, 16, 16)
    local reward = metrics.cider_scorer(REFS)
    for _, baseline in ipairs({"mean", "greedy"}) do
      local K = 3
      local loss, info = cap:self_critical_loss(images, REFS, {reward = reward, samples = K,
                                                               baseline = baseline})
      lu.assertTrue(cap.training, "training mode is given back")
      lu.assertEquals(#info.samples, 3 * K)
      local lp = log_probs(cap, images, info.samples, info.finished, K)
      local want, adv_sum = 0, {0, 0, 0}
      for i = 1, 3 * K do
        local img = (i - 1) // K + 1
        local _, r = reward({info.samples[i]}, {REFS[img]})
        lu.assertAlmostEquals(info.rewards[i], r[1], 1e-12)
        want = want - info.advantages[i] * lp[i]
        adv_sum[img] = adv_sum[img] + info.advantages[i]
      end
      lu.assertAlmostEquals(loss:item(), want / (3 * K), 1e-4, attention .. " " .. baseline)
      if baseline == "mean" then          -- leave-one-out: an image's advantages sum to 0
        for img = 1, 3 do lu.assertAlmostEquals(adv_sum[img], 0, 1e-9) end
      else
        lu.assertNotNil(info.greedy)
      end
      loss:backward()
      local any = false
      for _, p in ipairs(cap:parameters()) do
        any = any or (p.grad ~= nil and p.grad:abs():sum():item() > 0)
      end
      lu.assertEquals(any, true, "some gradient reaches the weights")
      cap:zero_grad()
    end
  end
end

-- the summed |grad| of the attention's score weights after one self-critical step
local function attention_grad(cap, images, cells)
  cap:zero_grad()
  local loss = cap:self_critical_loss(images, REFS, {reward = metrics.cider_scorer(REFS),
                                                     samples = 4, cells = cells})
  loss:backward()
  local total = 0
  for _, p in ipairs(cap.attention:parameters()) do
    if p.grad then total = total + p.grad:abs():sum():item() end
  end
  return total
end

function T.test_drawn_cells_carry_the_reward_to_where_the_model_looks()
  glimpse.manual_seed(7)
  local cap = H.hard({max_len = 6})
  local images = glimpse.rand(3, 1, 16, 16)
  -- the test-time rule reads a cell by an argmax: no gradient reaches the attention's scores
  lu.assertEquals(attention_grad(cap, images, "rule"), 0)
  -- drawn cells: their log-probabilities are in the policy gradient
  lu.assertTrue(attention_grad(cap, images, "sample") > 0)
  lu.assertEquals(cap.attention.hard_eval, "argmax")       -- the rule is given back
end

function T.test_it_learns_what_the_reward_asks_for()
  -- reward: minus the length; after training the samples are shorter than before
  glimpse.manual_seed(5)
  local cap = H.hard({max_len = 8})
  local images = glimpse.rand(4, 1, 16, 16)
  local refs = {{"a"}, {"a"}, {"a"}, {"a"}}
  local function short(captions)
    local s, total = {}, 0
    for i, c in ipairs(captions) do
      local n = 0
      for _ in c:gmatch("%S+") do n = n + 1 end
      s[i], total = -n, total - n
    end
    return total / #captions, s
  end
  local opt = glimpse.optim.Adam(cap:parameters(), {lr = 0.03})
  local first, last
  for step = 1, 40 do
    opt:zero_grad()
    local loss, info = cap:self_critical_loss(images, refs, {reward = short, samples = 4})
    loss:backward()
    opt:step()
    if step <= 5 then first = (first or 0) + info.reward / 5 end
    if step > 35 then last = (last or 0) + info.reward / 5 end
  end
  lu.assertTrue(last > first + 1, string.format("mean reward %.2f -> %.2f", first, last))
end

function T.test_meaning_f_pools_items_and_relations_as_spice_does()
  local ce = glimpse.models.caption_eval
  -- 3 items named, 2 of them right; 2 relations stated, 1 true; the scene: 3 items and 2
  -- relations, 1 of which the caption states: P = (2 + 1) / (3 + 2), R = (2 + 1) / (3 + 2)
  lu.assertAlmostEquals(ce.meaning_f({named = 3, matched = 2, triples = 2, true_triples = 1,
                                      items = 3, stated = 2, recalled = 1}), 0.6, 1e-12)
  -- P = 1, R = (2 + 1) / (4 + 3) (two of four items, one of three relations)
  lu.assertAlmostEquals(ce.meaning_f({named = 2, matched = 2, triples = 1, true_triples = 1,
                                      items = 4, stated = 3, recalled = 1}),
                        2 * (3 / 7) / (1 + 3 / 7), 1e-12)
  lu.assertEquals(ce.meaning_f({named = 0, matched = 0, triples = 0, true_triples = 0,
                                items = 2, stated = 1, recalled = 0}), 0)
end

function T.test_the_scene_source_hands_references_and_scenes_to_the_reward()
  local ce, sources = glimpse.models.caption_eval, glimpse.data.caption_sources
  local src = sources.scenes{dataset = "scenes", train = 24, valid = 4, test = 4, seed = 1}
  local cap = glimpse.captioner.Captioner{vocab = src.vocab, attention = "hard",
    encoder = {name = "small", in_channels = 1, channels = {4, 8}}, emb = 8, hidden = 16,
    attn_hidden = 8, max_len = 12}
  local data, loss, reward = ce.self_critical(cap, src, {samples = 2, meaning = 2})
  local b = data:collate({3, 5})
  lu.assertEquals(#b.references, 2)
  lu.assertEquals(b.references[2][1], src.train_refs(5)[1])
  lu.assertIs(b.references[2].scene, src.train_scene(5))
  -- the reward: CIDEr-D over the training corpus plus 2 x the meaning F-score
  local _, plain = select(3, ce.self_critical(cap, src, {samples = 2}))(
    {"a bag", src.train_scene(3).caption}, {b.references[1], b.references[1]})
  local st = glimpse.data.scene_text
  local _, per = st.semantics({"a bag", src.train_scene(3).caption},
                              {src.train_scene(3), src.train_scene(3)})
  local _, both = reward({"a bag", src.train_scene(3).caption}, {b.references[1], b.references[1]})
  for i = 1, 2 do lu.assertAlmostEquals(both[i], plain[i] + 2 * ce.meaning_f(per[i]), 1e-12) end
  lu.assertAlmostEquals(ce.meaning_f(per[2]), 1, 1e-12)      -- the scene's own caption
  -- repeats: 1.5 off for each item named again ("a bag above a bag": one bag named twice)
  local twice = {"a bag above a bag", "a bag above a bag and a bag left of the bag",
                 src.train_scene(3).caption}
  local refs3 = {b.references[1], b.references[1], b.references[1]}
  local _, base = select(3, ce.self_critical(cap, src, {samples = 2}))(twice, refs3)
  local _, penalised = select(3, ce.self_critical(cap, src, {samples = 2, repeats = 1.5}))(
    twice, refs3)
  lu.assertAlmostEquals(penalised[1], base[1] - 1.5, 1e-12)
  lu.assertAlmostEquals(penalised[2], base[2] - 3, 1e-12)
  lu.assertAlmostEquals(penalised[3], base[3], 1e-12)
  local l, stats = loss(cap, b)
  lu.assertTrue(l:item() == l:item() and stats.reward >= 0)
  lu.assertNil(stats.nll)
  -- xe: the model's own loss on the batch's reference captions is added (soft attention:
  -- nothing drawn after the samples, so the same seed draws the same samples)
  local soft = glimpse.captioner.Captioner{vocab = src.vocab,
    encoder = {name = "small", in_channels = 1, channels = {4, 8}}, emb = 8, hidden = 16,
    attn_hidden = 8, max_len = 12}
  local _, plain_loss = ce.self_critical(soft, src, {samples = 2})
  local _, mixed_loss = ce.self_critical(soft, src, {samples = 2, xe = 0.5})
  glimpse.manual_seed(4)
  local l0 = plain_loss(soft, b)
  glimpse.manual_seed(4)
  local l1, s1 = mixed_loss(soft, b)
  local lx = soft:loss(b.images, b.captions_in, b.captions_out, b.mask)
  lu.assertAlmostEquals(l1:item(), l0:item() + 0.5 * lx:item(), 1e-5)
  lu.assertNotNil(s1.nll)
  H.assert_error_matches({"caption_eval.self_critical", "meaning", "no"}, ce.self_critical, cap,
                         {train = src.train, train_refs = src.train_refs}, {meaning = 1})
  H.assert_error_matches({"caption_eval.self_critical", "repeats = 2", "no"}, ce.self_critical,
                         cap, {train = src.train, train_refs = src.train_refs}, {repeats = 2})
end

function T.test_bad_options_and_references_are_errors()
  local cap = H.tiny()
  local images = glimpse.rand(3, 1, 16, 16)
  local reward = metrics.cider_scorer(REFS)
  H.assert_error_matches({"Captioner:self_critical_loss", "'sample'", "samples"},
                         cap.self_critical_loss, cap, images, REFS, {reward = reward, sample = 2})
  H.assert_error_matches({"Captioner:self_critical_loss", "reward", "required"},
                         cap.self_critical_loss, cap, images, REFS, {})
  H.assert_error_matches({"Captioner:self_critical_loss", "at least 2", "got 1"},
                         cap.self_critical_loss, cap, images, REFS, {reward = reward, samples = 1})
  H.assert_error_matches({"Captioner:self_critical_loss", "3 reference lists", "2 entries"},
                         cap.self_critical_loss, cap, images, {{"a"}, {"a"}}, {reward = reward})
  lu.assertTrue(cap.training)
end

return T
