"""The llm runtime's incremental detokenization and stop conditions, with a real byte-level BPE
tokenizer trained here on text with multi-byte characters."""

from __future__ import annotations

import functools

import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import decoders, models, pre_tokenizers, trainers

from inferd.backends.llm.params import SamplingParams
from inferd.backends.llm.stops import StopChecker

CORPUS = [
    "The café on the corner serves crème brûlée and thé glacé.",
    "Ça va? Élodie a dit: très bien, merci! éééé ééé éé",
    "Party time 🎉🎉 with friends 👩‍👩‍👧 and cake 🍰.",
    "日本語のテキストも少し。中文也有一点。",
    "Stop here. STOP there. The end is near; END.",
    "hello world, hello there, hello again",
]
ALPHABET = "abe lo.,STOPé🎉日本中\n"
EOS = "<eos>"


@functools.cache
def tokenizer() -> tokenizers.Tokenizer:
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[EOS],
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer)
    return tok


def eos_id() -> int:
    token = tokenizer().token_to_id(EOS)
    assert token is not None
    return token


def ids_of(text: str) -> list[int]:
    return list(tokenizer().encode(text).ids)


def run(
    text: str | list[int],
    params: SamplingParams | None = None,
    prompt: str = "Prompt: ",
) -> tuple[list[str], str | None, int]:
    """The chunks emitted for ``text``'s tokens, the finish reason and the tokens pushed."""
    params = params or SamplingParams(max_tokens=10_000)
    checker = StopChecker(tokenizer(), params, frozenset({eos_id()}), ids_of(prompt))
    chunks: list[str] = []
    ids = ids_of(text) if isinstance(text, str) else text
    pushed = 0
    for token in ids:
        chunk, reason = checker.push(token)
        pushed += 1
        chunks.append(chunk)
        if reason is not None:
            return chunks, reason, pushed
    chunks.append(checker.flush())
    return chunks, None, pushed


def test_the_tokenizer_splits_characters_across_tokens() -> None:
    # the premise of the tests below: some tokens hold part of a character
    pieces = [tokenizer().decode([t]) for t in ids_of("日本中🎉")]
    assert any("\ufffd" in p for p in pieces)


@pytest.mark.parametrize("text", [*CORPUS, "🎉", "é", "日本🎉é", "ééééééééé", "a🎉b"])
def test_streamed_text_is_the_whole_text_and_never_a_broken_character(text: str) -> None:
    chunks, reason, _ = run(text)
    assert reason is None
    assert "".join(chunks) == text
    assert not any("\ufffd" in c for c in chunks)


@given(st.text(alphabet=ALPHABET, max_size=40), st.text(alphabet=ALPHABET, max_size=8))
@settings(max_examples=150, deadline=None)
def test_any_text_streams_whole(text: str, prompt: str) -> None:
    chunks, _, _ = run(text, prompt=prompt)
    assert "".join(chunks) == text
    assert not any("\ufffd" in c for c in chunks)


@given(st.text(alphabet=ALPHABET, min_size=1, max_size=40), st.data())
@settings(max_examples=200, deadline=None)
def test_a_stop_string_spanning_tokens_ends_the_text_before_it(
    text: str, data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, len(text) - 1))
    end = data.draw(st.integers(start + 1, min(len(text), start + 6)))
    stop = text[start:end]
    other = data.draw(st.text(alphabet=ALPHABET, min_size=1, max_size=4))
    stops = (stop, other)
    chunks, reason, _ = run(text, SamplingParams(max_tokens=10_000, stop=stops))
    # what a streaming reader can know: the first token after which some stop string is in
    # the text, and the text before the earliest match in it
    ids = ids_of(text)
    for k in range(1, len(ids) + 1):
        seen = tokenizer().decode(ids[:k])
        found = [i for i in (seen.find(s) for s in stops) if i >= 0]
        if found:
            break
    assert reason == "stop"
    assert "".join(chunks) == seen[: min(found)]
    assert not any("\ufffd" in c for c in chunks)


def test_stop_string_across_boundaries_is_held_then_dropped() -> None:
    text = "hello there, hello again"
    chunks, reason, pushed = run(text, SamplingParams(max_tokens=100, stop=("lo ag",)))
    assert reason == "stop"
    assert "".join(chunks) == "hello there, hel"
    assert pushed < len(ids_of(text))
    # a near miss is held only while it could still match, then emitted
    chunks, reason, _ = run("hello there", SamplingParams(max_tokens=100, stop=("lo tx",)))
    assert reason is None
    assert "".join(chunks) == "hello there"


def test_include_stop_str_in_output_keeps_the_stop_string() -> None:
    params = SamplingParams(max_tokens=100, stop=("STOP",), include_stop_str_in_output=True)
    chunks, reason, _ = run("Stop here. STOP there.", params)
    assert reason == "stop"
    assert "".join(chunks) == "Stop here. STOP"


def test_a_stop_string_made_of_multibyte_characters() -> None:
    chunks, reason, _ = run("cake 🍰 and 🎉🎉 party", SamplingParams(max_tokens=99, stop=("🎉",)))
    assert reason == "stop"
    assert "".join(chunks) == "cake 🍰 and "


def test_eos_stops_without_its_text_unless_ignored() -> None:
    ids = [*ids_of("hello"), eos_id(), *ids_of(" world")]
    chunks, reason, pushed = run(ids)
    assert reason == "stop"
    assert "".join(chunks) == "hello"
    assert pushed == len(ids_of("hello")) + 1
    chunks, reason, _ = run(ids, SamplingParams(max_tokens=100, ignore_eos=True))
    assert reason is None
    assert "".join(chunks) == "hello world"  # special tokens are skipped in the text


def test_stop_token_ids_stop_like_eos() -> None:
    world = ids_of(" world")
    ids = [*ids_of("hello"), *world]
    params = SamplingParams(max_tokens=100, stop_token_ids=(world[0],))
    chunks, reason, _ = run(ids, params)
    assert reason == "stop"
    assert "".join(chunks) == "hello"


def test_min_tokens_defers_every_stop() -> None:
    hello = ids_of("hello")
    ids = [*hello, eos_id(), *ids_of(" STOP world")]
    params = SamplingParams(max_tokens=100, min_tokens=len(hello) + 1, stop=("STOP",))
    checker = StopChecker(tokenizer(), params, frozenset({eos_id()}), [])
    assert eos_id() in checker.suppressed()
    chunks, reason, _ = run(ids, params, prompt="")
    assert reason == "stop"
    assert "".join(chunks) == "hello "
    # under min_tokens the whole way, neither EOS nor the stop string ends it
    late = SamplingParams(max_tokens=100, min_tokens=len(ids), stop=("STOP",))
    chunks, reason, _ = run(ids, late, prompt="")
    assert reason is None
    assert "".join(chunks) == "hello STOP world"


def test_suppressed_is_empty_once_min_tokens_are_out() -> None:
    params = SamplingParams(max_tokens=10, min_tokens=1, stop_token_ids=(7,))
    checker = StopChecker(tokenizer(), params, frozenset({eos_id()}), [])
    assert checker.suppressed() == frozenset({7, eos_id()})
    checker.push(ids_of("a")[0])
    assert checker.suppressed() == frozenset()


def test_max_tokens_finishes_with_length_and_flushes_what_was_held() -> None:
    ids = ids_of("hello there")
    params = SamplingParams(max_tokens=len(ids), stop=("there!",))
    chunks, reason, pushed = run(ids, params)
    assert reason == "length"
    assert pushed == len(ids)
    assert "".join(chunks) == "hello there"
    chunks, reason, _ = run(ids, SamplingParams(max_tokens=2))
    assert reason == "length"
    assert "".join(chunks) == tokenizer().decode(ids[:2])


def test_length_inside_a_character_emits_the_replacement() -> None:
    ids = ids_of("a日")
    assert len(ids) >= 3  # "日" is several byte tokens here
    chunks, reason, _ = run(ids, SamplingParams(max_tokens=len(ids) - 1))
    assert reason == "length"
    assert "".join(chunks).startswith("a")
    assert "".join(chunks).endswith("\ufffd")


def test_an_invalid_byte_is_emitted_as_a_replacement_and_not_held_forever() -> None:
    lone = tokenizer().token_to_id("©")  # the byte 0xA9 alone: a stray continuation byte
    assert lone is not None
    ids = [*ids_of("a"), lone, *ids_of("b hello world hello")]
    chunks, reason, _ = run(ids)
    assert reason is None
    assert "".join(chunks) == "a\ufffdb hello world hello"
    assert "".join(chunks[:-1]) == "a\ufffdb hello world hello"  # before the flush
    lead = tokenizer().token_to_id("Ã")  # 0xC3, a lead byte never completed
    assert lead is not None
    chunks, _, _ = run([lead] * 40)
    assert "".join(chunks).count("\ufffd") == 40
    # the window stays bounded: most of them are emitted before the end
    assert "".join(chunks[:-1]).count("\ufffd") >= 30


def byte_chars() -> dict[int, str]:
    """GPT-2's byte-to-character table of byte-level BPE."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = dict(zip(printable, printable, strict=True))
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + extra
            extra += 1
    return {b: chr(c) for b, c in chars.items()}


def straddling(text: str) -> tuple[tokenizers.Tokenizer, list[int]]:
    """A byte-level tokenizer whose every token ends inside a character, and ``text``'s ids."""
    data = text.encode()
    chunks = [data[:1]] + [data[i : i + 3] for i in range(1, len(data), 3)]
    table = byte_chars()
    vocab = {table[b]: b for b in range(256)}
    ids = []
    for chunk in chunks:
        piece = "".join(table[b] for b in chunk)
        ids.append(vocab.setdefault(piece, len(vocab)))
    tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.decoder = decoders.ByteLevel()
    return tok, ids


@pytest.mark.parametrize("stop", [None, "本日本", "日日"])
def test_a_run_of_tokens_ending_inside_characters_streams_whole(stop: str | None) -> None:
    text = "日本" * 20 + "日"
    tok, ids = straddling(text)
    assert all(tok.decode(ids[:k]).endswith("\ufffd") for k in range(1, len(ids)))
    params = SamplingParams(max_tokens=1000, stop=(stop,) if stop else ())
    checker = StopChecker(tok, params, frozenset(), [])
    chunks, reason = [], None
    for token in ids:
        chunk, reason = checker.push(token)
        chunks.append(chunk)
        if reason:
            break
    else:
        chunks.append(checker.flush())
    assert not any("\ufffd" in c for c in chunks)
    if stop == "本日本":
        assert reason == "stop"
        assert "".join(chunks) == "日"
    else:
        assert reason is None
        assert "".join(chunks) == text
        # emitted as it comes, not all at the end
        assert len("".join(chunks[: len(ids) // 2])) > len(text) // 3


def test_push_after_the_finish_emits_nothing() -> None:
    params = SamplingParams(max_tokens=1)
    checker = StopChecker(tokenizer(), params, frozenset(), [])
    assert checker.push(ids_of("a")[0]) == ("a", "length")
    assert checker.push(ids_of("b")[0]) == ("", "length")


def test_skip_special_tokens_false_keeps_them() -> None:
    ids = [*ids_of("hi"), eos_id()]
    params = SamplingParams(max_tokens=10, ignore_eos=True, skip_special_tokens=False)
    chunks, _, _ = run(ids, params)
    assert "".join(chunks) == "hi" + EOS


@functools.cache
def llama_style() -> tokenizers.Tokenizer:
    """A SentencePiece-style tokenizer as Llama's tokenizer.json has it: spaces as "▁",
    characters outside the vocabulary as <0xNN> byte tokens, the first space stripped."""
    from tokenizers import normalizers

    pieces = ["<unk>", *(f"<0x{b:02X}>" for b in range(256)), *"▁helowrdsaytä,", "▁h", "ll"]
    vocab = {piece: i for i, piece in enumerate(pieces)}
    merges = [("▁", "h"), ("l", "l")]
    tok = tokenizers.Tokenizer(
        models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True)
    )
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(content=" ", left=1, right=0),
        ]
    )
    return tok


def llama_ids(text: str) -> list[int]:
    return list(llama_style().encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("answer", [" hello wörld 🎉 日本", "🎉🎉", " é", " hello"])
def test_a_sentencepiece_style_tokenizer_streams_as_it_decodes(answer: str) -> None:
    tok = llama_style()
    prompt = llama_ids("say")
    ids = llama_ids("say" + answer)[len(prompt) :]
    assert tok.decode(prompt + ids) == "say" + answer
    if not answer.isascii():  # bytes, several a character
        assert any(tok.id_to_token(t).startswith("<0x") for t in ids)
    checker = StopChecker(tok, SamplingParams(max_tokens=100), frozenset(), prompt)
    chunks = [checker.push(t)[0] for t in ids]
    chunks.append(checker.flush())
    assert "".join(chunks) == answer  # the leading space kept: decoded in context
    assert not any("\ufffd" in c for c in chunks)


def test_flush_sends_what_was_held_once() -> None:
    params = SamplingParams(max_tokens=100, stop=("hello!",))
    checker = StopChecker(tokenizer(), params, frozenset(), [])
    sent = "".join(checker.push(t)[0] for t in ids_of("say hello"))
    assert sent == "say "  # "hello" could begin the stop string
    assert checker.flush() == "hello"
    assert checker.finish_reason == "length"
    assert checker.flush() == ""
    stopped = StopChecker(tokenizer(), SamplingParams(max_tokens=1), frozenset(), [])
    assert stopped.push(ids_of("a")[0]) == ("a", "length")
    assert stopped.flush() == ""
