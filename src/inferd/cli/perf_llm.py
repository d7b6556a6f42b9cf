"""``inferd perf -i openai``'s flags (AIPerf's and genai-perf's names and meanings), their
reading into :class:`LlmOptions`, and the transport they build.

Every flag of this group needs ``-i openai``, and the flags of tensor models (``-b``,
``--input-data``, ``--shape``...) are refused with it: nothing is accepted and then ignored.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from inferd.cli.perf_flags import positive_int
from inferd.errors import InvalidArgumentError
from inferd.tools.perf.llm_inputs import EndpointType, LlmOptions, load_prompts, token_counter
from inferd.tools.perf.openai_client import OpenAITransport
from inferd.tools.perf.options import PerfOptions


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"'{text}' must not be below 0")
    return value


# (dest, flag) of the group, to refuse them without -i openai
_FLAGS = (
    ("endpoint_type", "--endpoint-type"),
    ("input_file", "--input-file"),
    ("synthetic_input_tokens_mean", "--synthetic-input-tokens-mean"),
    ("synthetic_input_tokens_stddev", "--synthetic-input-tokens-stddev"),
    ("output_tokens_mean", "--output-tokens-mean"),
    ("output_tokens_stddev", "--output-tokens-stddev"),
    ("num_prompts", "--num-prompts"),
    ("tokenizer", "--tokenizer"),
    ("use_server_token_count", "--use-server-token-count"),
)


def add_llm_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("LLM load (-i openai: the server's /v1 API; AIPerf's flag names)")
    group.add_argument(
        "--endpoint-type",
        choices=[e.value for e in EndpointType],
        help="/v1/chat/completions (chat, the default), /v1/completions or /v1/embeddings",
    )
    group.add_argument(
        "--input-file",
        metavar="FILE",
        type=Path,
        help='prompts as JSONL, one {"text": ...} or {"messages": [...]} per line '
        "(default: synthetic prompts)",
    )
    group.add_argument(
        "--synthetic-input-tokens-mean",
        metavar="N",
        type=positive_int,
        help="synthetic prompts: mean length in tokens (default 550)",
    )
    group.add_argument(
        "--synthetic-input-tokens-stddev",
        metavar="N",
        type=_non_negative,
        help="synthetic prompts: standard deviation of the length (default 0)",
    )
    group.add_argument(
        "--output-tokens-mean",
        metavar="N",
        type=positive_int,
        help="sent as each request's max_tokens (default: not sent)",
    )
    group.add_argument(
        "--output-tokens-stddev",
        metavar="N",
        type=_non_negative,
        help="standard deviation of max_tokens around --output-tokens-mean (default 0)",
    )
    group.add_argument(
        "--num-prompts",
        metavar="N",
        type=positive_int,
        help="synthetic prompts: how many distinct ones, sent in turn (default 100)",
    )
    group.add_argument(
        "--tokenizer",
        metavar="PATH",
        type=Path,
        help="the server model's tokenizer.json (or its folder) to count tokens with; "
        "without it tokens are approximated by whitespace-separated words",
    )
    group.add_argument(
        "--use-server-token-count",
        action="store_true",
        default=None,
        help="output tokens from the server's usage (streamed: stream_options.include_usage)",
    )


def llm_options_from_args(args: argparse.Namespace) -> LlmOptions | None:
    """The LLM options of ``-i openai`` (None for the other protocols); InvalidArgumentError
    names the first flag that cannot work."""
    given = [flag for dest, flag in _FLAGS if getattr(args, dest) is not None]
    if args.protocol != "openai":
        if given:
            raise InvalidArgumentError(f"{given[0]} needs -i openai")
        return None
    tensor_flags = [
        flag
        for flag, value in (
            ("-b", args.batch_size != 1),
            ("--input-data", args.input_data),
            ("-z", args.zero),
            ("--shape", args.shape),
            ("--string-data", args.string_data),
        )
        if value
    ]
    if tensor_flags:
        raise InvalidArgumentError(
            f"{tensor_flags[0]} is for tensor models; with -i openai the inputs are prompts "
            "(--input-file or --synthetic-input-tokens-mean)"
        )
    endpoint = EndpointType(args.endpoint_type or "chat")
    if args.input_file is not None:
        for dest, flag in _FLAGS[2:4] + _FLAGS[6:7]:
            if getattr(args, dest) is not None:
                raise InvalidArgumentError(
                    f"{flag} makes synthetic prompts: leave it out with --input-file"
                )
    if args.output_tokens_stddev is not None and args.output_tokens_mean is None:
        raise InvalidArgumentError("--output-tokens-stddev needs --output-tokens-mean")
    if endpoint is EndpointType.EMBEDDINGS:
        refused = [
            flag
            for flag, value in (
                ("--streaming", args.streaming),
                ("--output-tokens-mean", args.output_tokens_mean is not None),
                ("--use-server-token-count", args.use_server_token_count),
            )
            if value
        ]
        if refused:
            raise InvalidArgumentError(
                f"{refused[0]} does not apply to --endpoint-type embeddings (no output tokens)"
            )
    return LlmOptions(
        endpoint=endpoint,
        streaming=bool(args.streaming),
        input_file=args.input_file,
        input_tokens_mean=args.synthetic_input_tokens_mean or 550,
        input_tokens_stddev=args.synthetic_input_tokens_stddev or 0.0,
        output_tokens_mean=args.output_tokens_mean,
        output_tokens_stddev=args.output_tokens_stddev or 0.0,
        num_prompts=args.num_prompts or 100,
        tokenizer=args.tokenizer,
        server_token_count=bool(args.use_server_token_count),
    )


def openai_transport(options: PerfOptions) -> OpenAITransport:
    """The transport of ``-i openai`` with its prompts read or made (before the event loop:
    this reads files)."""
    llm = options.llm
    assert llm is not None
    counter = token_counter(llm.tokenizer)
    prompts = load_prompts(llm, counter, options.seed)
    return OpenAITransport(
        options.url,
        options.model,
        llm,
        prompts,
        counter,
        headers=options.headers,
        tls=options.https,
    )


__all__ = ["add_llm_arguments", "llm_options_from_args", "openai_transport"]
