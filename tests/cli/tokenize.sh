#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `verity tokenize`: output format (one JSON array of ids per line; --pieces adds an array of
# pieces), --no-bos, --special, -f FILE, and bad input (missing, malformed or unsupported model,
# bad options): exit status 2 with exactly one line on stderr. Run by tests/run.sh with
# VERITY=<build>/verity; prints PASS/FAIL/SKIP lines.
set -u
cd "$(dirname "$0")/../.." || exit 2
V=${VERITY:-build/release/verity}
SHARED=${VERITY_SHARED:-../shared}
STORIES=$SHARED/models/stories260K.gguf
GPT2=$SHARED/vocab/ggml-vocab-gpt-2.gguf
BERT=$SHARED/vocab/ggml-vocab-bert-bge.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check() { # name expected actual
    if [ "$2" == "$3" ]; then echo "PASS $1"; else echo "FAIL $1: expected '$2', got '$3'"; fi
}

# bad input: exit 2 and exactly one line on stderr
bad() { # name args...
    local name=$1; shift
    "$V" tokenize "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$? lines
    lines=$(wc -l <"$tmp/err")
    if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && [ ! -s "$tmp/out" ]; then
        echo "PASS $name"
    else
        echo "FAIL $name: exit $rc, $lines stderr lines: $(head -c 300 "$tmp/err" | tr '\n' ' ')"
    fi
}

if [ -f "$STORIES" ]; then
    check tokenize.ids "[1, 403, 407, 261, 378]" "$("$V" tokenize -m "$STORIES" "Once upon a time")"
    check tokenize.no_bos "[403, 407, 261, 378]" "$("$V" tokenize -m "$STORIES" --no-bos "Once upon a time")"
    check tokenize.pieces "$(printf '[1, 403]\n["<s>", "\xe2\x96\x81Once"]')" \
        "$("$V" tokenize -m "$STORIES" --pieces Once)"
    check tokenize.empty "[1]" "$("$V" tokenize -m "$STORIES" "")"
    printf 'Once upon a time' >"$tmp/in.txt"
    check tokenize.file "[1, 403, 407, 261, 378]" "$("$V" tokenize -m "$STORIES" -f "$tmp/in.txt")"
    check tokenize.stdin "[1, 403, 407, 261, 378]" "$("$V" tokenize -m "$STORIES" -f - <"$tmp/in.txt")"
    bad tokenize.no_text -m "$STORIES"
    bad tokenize.two_texts -m "$STORIES" a b
    bad tokenize.unknown_option -m "$STORIES" --bogus x
    bad tokenize.text_and_file -m "$STORIES" -f "$tmp/in.txt" x
    bad tokenize.missing_input_file -m "$STORIES" -f "$tmp/nope.txt"
else
    echo "SKIP tokenize.stories260K: $STORIES not found (shared data missing)"
fi

if [ -f "$GPT2" ]; then
    check tokenize.special "[15496, 50256]" "$("$V" tokenize -m "$GPT2" --special "Hello<|endoftext|>")"
    check tokenize.no_special "[15496, 27, 91, 437, 1659, 5239, 91, 29]" \
        "$("$V" tokenize -m "$GPT2" "Hello<|endoftext|>")"
else
    echo "SKIP tokenize.gpt-2: $GPT2 not found (shared data missing)"
fi

if [ -f "$BERT" ]; then
    bad tokenize.unsupported_bert -m "$BERT" hello
    grep -q "'bert'.*not supported" "$tmp/err" && echo "PASS tokenize.unsupported_message" ||
        echo "FAIL tokenize.unsupported_message: $(cat "$tmp/err")"
else
    echo "SKIP tokenize.bert: $BERT not found (shared data missing)"
fi

bad tokenize.no_model hello
bad tokenize.missing_model -m "$tmp/does-not-exist.gguf" hello
printf 'GGUF\003\000\000\000garbage' >"$tmp/bad.gguf"
bad tokenize.malformed_model -m "$tmp/bad.gguf" hello
printf 'not a gguf at all' >"$tmp/text.gguf"
bad tokenize.not_gguf -m "$tmp/text.gguf" hello
"$V" tokenize --help >"$tmp/help" 2>&1 && grep -q "JSON array" "$tmp/help" &&
    echo "PASS tokenize.help" || echo "FAIL tokenize.help"
