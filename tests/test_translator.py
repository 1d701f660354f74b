"""Chapter 6's translator: the generated corpus and its splits, the tokenizer, decoding, a short training run
(the loss must fall; the full target is measured by `make bench`), and the committed checkpoint, which must
still be what `make train` would produce from the current corpus and code."""
import pytest
import torch

from attnlab.translator.vocabulary import BOS, EOS, PAD, UNK, Vocab, split_en, split_zh
from attnlab.decoding.beam_search import beam_search, greedy_translate
from attnlab.translator.training import (TrainingConfig, exact_match, load_translator, train_translator,
                                         translator_config)
from attnlab.models.encoder_decoder import Transformer
from attnlab.translator.corpus import HELD_OUT_NUMBER_NOUN, HELD_OUT_SUBJECT_VERB, make_sentences, make_splits

from tests.submissions import REPO

CHECKPOINT = REPO / "solutions" / "ch06_decoder" / "translator_zh_en.pt"


@pytest.fixture(scope="module")
def splits():
    return make_splits(seed=0)


@pytest.mark.parametrize("zh, en", [
    ("我有一只猫", "i have a cat"),
    ("他有一只猫", "he has a cat"),
    ("她没有一头大象", "she does not have an elephant"),
    ("我有一只老猫", "i have an old cat"),
    ("他们养两条鱼", "they keep two fish"),
    ("你要三只老鼠", "you want three mice"),
    ("他不喜欢十只白羊", "he does not like ten white sheep"),
    ("我们看见一头大大象", "we see a big elephant"),
])
def test_template_translations(zh, en):
    assert dict((s.zh, s.en) for s in make_sentences())[zh] == en


def test_corpus_is_deterministic_and_every_sentence_is_unique():
    sentences = make_sentences()
    assert [s.zh for s in sentences] == [s.zh for s in make_sentences()]
    assert len({s.zh for s in sentences}) == len(sentences) > 40_000
    assert make_splits(seed=0) == make_splits(seed=0)


def test_held_out_combinations_never_appear_in_training(splits):
    train = splits["train"]
    assert len(splits["random_test"]) == 1000 and len(splits["compositional_test"]) > 1000
    assert not set(train) & set(splits["random_test"])
    for number, noun in HELD_OUT_NUMBER_NOUN:
        assert not any(number in zh and zh.endswith(noun) for zh, _ in train)
        assert any(number in zh for zh, _ in train) and any(zh.endswith(noun) for zh, _ in train)
    for subject, verb in HELD_OUT_SUBJECT_VERB:
        assert not any(zh.startswith(subject) and not zh.startswith(subject + "们") and verb in zh for zh, _ in train)
        assert any(zh.startswith(subject) for zh, _ in train) and any(verb in zh for zh, _ in train)
    # every word of the compositional sentences was seen in training
    vocab = Vocab.build([zh for zh, _ in train], split_zh)
    assert all(UNK not in vocab.encode(zh) for zh, _ in splits["compositional_test"])


def test_tokenizer_round_trip_padding_and_unknown_tokens(splits):
    zh_vocab = Vocab.build([zh for zh, _ in splits["train"]], split_zh)
    en_vocab = Vocab.build([en for _, en in splits["train"]], split_en)
    assert zh_vocab.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    ids, mask = en_vocab.encode_batch(["i have a cat", "they do not want an old elephant"])
    assert ids.shape == (2, 9) and ids[0, 0] == BOS and ids[0, 5] == EOS and (ids[0, 6:] == PAD).all()
    assert torch.equal(mask, ids != PAD)
    assert en_vocab.decode(ids[1].tolist()) == "they do not want an old elephant"
    assert zh_vocab.decode(zh_vocab.encode("我有一只猫"), join="") == "我有一只猫"
    assert zh_vocab.encode("我有一只龙")[5] == UNK               # 龙 (dragon) is not in the corpus
    with pytest.raises(ValueError, match="more than max_len"):
        en_vocab.encode_batch(["i have a cat"], max_len=5)


def test_short_training_lowers_the_loss(splits):
    import math
    torch.manual_seed(0)
    zh_vocab = Vocab.build([zh for zh, _ in splits["train"]], split_zh)
    en_vocab = Vocab.build([en for _, en in splits["train"]], split_en)
    model = Transformer(translator_config(len(zh_vocab), len(en_vocab)))
    report = train_translator(model, splits["train"], zh_vocab, en_vocab,
                              TrainingConfig(max_steps=1500, warmup_steps=100, eval_every=10_000, dev_size=500),
                              progress=False, stop_after=120)
    uniform = math.log(len(en_vocab))        # the loss of predicting every target word with equal probability
    first, last = sum(report["loss"][:10]) / 10, sum(report["loss"][-10:]) / 10
    assert report["steps"] == 120
    assert first > 0.8 * uniform and last < 0.5 * uniform, (first, last, uniform)


@pytest.fixture(scope="module")
def trained():
    return load_translator(CHECKPOINT)


def test_checkpoint_is_small_and_matches_the_current_corpus_and_code(trained, splits):
    assert CHECKPOINT.stat().st_size < 5e6
    model, zh_vocab, en_vocab = trained
    assert zh_vocab.itos == Vocab.build([zh for zh, _ in splits["train"]], split_zh).itos
    assert en_vocab.itos == Vocab.build([en for _, en in splits["train"]], split_en).itos
    assert model.config == translator_config(len(zh_vocab), len(en_vocab))
    saved = torch.load(CHECKPOINT, weights_only=True)["report"]
    assert saved["sizes"] == {name: len(pairs) for name, pairs in splits.items()}
    assert saved["config"] == TrainingConfig().__dict__, "the checkpoint was trained with other settings: make train"


def test_checkpoint_still_scores_what_it_recorded(trained, splits):
    model, zh_vocab, en_vocab = trained
    saved = torch.load(CHECKPOINT, weights_only=True)["report"]
    score = exact_match(model, splits["random_test"], zh_vocab, en_vocab)
    assert score >= 0.99
    # Greedy argmax over the same weights and inputs: a different CPU may round one near-tie differently,
    # which moves the score by 1/1000 at most in practice; more means the decoding code changed.
    assert abs(score - saved["random_test"]) <= 0.001
    assert abs(exact_match(model, splits["compositional_test"], zh_vocab, en_vocab)
               - saved["compositional_test"]) <= 1 / len(splits["compositional_test"])


def test_beam_search_of_width_one_is_greedy_and_wider_beams_score_at_least_as_well(trained):
    model, zh_vocab, en_vocab = trained
    for zh in ["我有一只猫", "她养三只猫", "他们不要一头老大象", "你们没有七匹白马", "我没有三只猫"]:
        ids = torch.tensor([zh_vocab.encode(zh)])
        greedy = greedy_translate(model, ids)[0].tolist()
        assert beam_search(model, ids, beam_size=1) == [t for t in greedy if t != EOS]

        def score(tokens):      # length-normalised log-probability, as beam_search ranks hypotheses
            target = torch.tensor([[BOS] + tokens + [EOS]])
            with torch.no_grad():
                log_probs = model(ids, target[:, :-1]).log_softmax(-1)
            return log_probs[0].gather(1, target[0, 1:, None]).sum().item() / (len(tokens) + 1)

        assert score(beam_search(model, ids, beam_size=4)) >= score(beam_search(model, ids, beam_size=1)) - 1e-6


def test_beam_search_returns_finished_translations(trained, splits):
    """A finished hypothesis keeps its place in the beam; the best one must be complete (ends with <eos>)."""
    import random
    model, zh_vocab, en_vocab = trained
    pairs = random.Random(0).sample(splits["compositional_test"], 60) + random.Random(0).sample(splits["random_test"], 60)
    for zh, en in pairs:
        ids = torch.tensor([zh_vocab.encode(zh)])
        greedy = en_vocab.decode(greedy_translate(model, ids)[0].tolist())
        if greedy == en:        # where greedy is right, a wider beam must not return a truncated sentence
            assert en_vocab.decode(beam_search(model, ids, beam_size=4)) == en, zh
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, torch.tensor([zh_vocab.encode("我有一只猫")]), beam_size=0)


def test_bad_input_to_decoding(trained):
    model, zh_vocab, _ = trained
    with pytest.raises(ValueError, match="S >= 1"):
        greedy_translate(model, torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="one sentence"):
        beam_search(model, torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="S >= 1"):          # an empty sentence: once an IndexError in softmax
        beam_search(model, torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="token ids must be in"):
        greedy_translate(model, torch.tensor([[1, len(zh_vocab), 2]]))
    with pytest.raises(ValueError, match="longer than max_seq_len"):
        greedy_translate(model, torch.ones(1, 40, dtype=torch.long))
