"""GPT-2's byte-level spelling, for the tests' own decoding of token ids (test_harmony_rl.sh,
test_gpt2_bounds.sh): one copy of the byte-to-unicode table."""


def byte_decoder():
    """{the unicode character GPT-2 spells a byte with: that byte}, for all 256 bytes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def tokjson_decoder(tj):
    """decode(ids) -> str for a parsed byte-level tokenizer.json: added tokens by their content,
    the others by their vocab spelling's bytes; invalid UTF-8 replaced."""
    names = {t["id"]: t["content"] for t in tj["added_tokens"]}
    inv = {v: k for k, v in tj["model"]["vocab"].items()}
    byte = byte_decoder()

    def decode(ids):
        return b"".join(names[i].encode() if i in names else bytes(byte[c] for c in inv[i])
                        for i in ids).decode("utf-8", "replace")
    return decode
