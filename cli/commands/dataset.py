"""`computeall dataset create|list|show|sample|share`: a thin client of the dataset service over NATS.

A dataset is its creator's: `list` shows yours and the public ones, `share NAME` makes yours public
(read only for everyone else), `share NAME --private` takes it back."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from pydantic import ValidationError

from computeall.protocol import dataset_client as client
from computeall.protocol.dataset_api import CreateDataset, DatasetProgress, SampleRequest, SplitSpec, progress_subject
from computeall.protocol.limits import TOKENIZER_FILE_BYTES

from ..cluster_file import add_data_dir_argument
from ..client import connect
from ..data_upload import expand, send_files
from ..errors import UserError
from ..identity import add_user_arguments, user_credential


def register(subparsers) -> None:
    parser = subparsers.add_parser("dataset", help="create and inspect datasets (tokenizer, token shards, splits)")
    sub = parser.add_subparsers(dest="dataset_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--nats", help="NATS URL (default: $NATS_URL, else the running cluster)")
        add_data_dir_argument(p)
        p.add_argument("--prefix", help="subject prefix (default: $COMPUTEALL_PREFIX or ca)")
        p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the service")
        p.add_argument("--json", action="store_true", help="print JSON")
        add_user_arguments(p)

    create = sub.add_parser("create", help="train a tokenizer (or reuse one), tokenize, cut a validation split")
    create.add_argument("name")
    create.add_argument("--files", nargs="+", required=True,
                        help="text files, folders (recursive) or .jsonl files; uploaded unless the service reads them as they are")
    create.add_argument("--vocab-size", type=int, default=4096)
    create.add_argument("--split", default="random-doc:0.1", help="random-doc|tail|hash-doc[:FRACTION] (default random-doc:0.1)")
    create.add_argument("--split-name", default="val", help="name of the held-out split")
    tokenizer = create.add_mutually_exclusive_group()
    tokenizer.add_argument("--tokenizer-from", help="reuse the tokenizer of this dataset (then --vocab-size is ignored)")
    tokenizer.add_argument("--tokenizer-file", metavar="TOKENIZER_JSON",
                           help="use this tokenizer.json (e.g. of a Hugging Face directory; then --vocab-size is ignored)")
    create.add_argument("--jsonl-field", default="text", help="the text field of .jsonl lines")
    create.add_argument("--document-unit", choices=["paragraph", "file"], default="paragraph", help="what one document of a plain text file is")
    create.add_argument("--skip-invalid-utf8", action="store_true", help="skip documents with invalid UTF-8 (and count them) instead of failing")
    create.add_argument("--seed", type=int, default=0)
    create.add_argument("--shard-tokens", type=int, default=1 << 24)
    create.add_argument("--reuse", action="store_true", help="if the dataset exists with the same inputs, return it")
    create.add_argument("--quiet", action="store_true", help="no progress bars")
    common(create)
    create.set_defaults(func=_create, timeout=3600.0)

    listing = sub.add_parser("list", help="your datasets and the public ones")
    common(listing)
    listing.set_defaults(func=_list)

    show = sub.add_parser("show", help="one dataset: vocab, documents, tokens per split, shards, digests")
    show.add_argument("name")
    common(show)
    show.set_defaults(func=_show)

    sample = sub.add_parser("sample", help="decoded text of real batches")
    sample.add_argument("name")
    sample.add_argument("--split", default="val")
    sample.add_argument("--n", type=int, default=2)
    sample.add_argument("--context", type=int, default=128)
    sample.add_argument("--seed", type=int, default=0)
    common(sample)
    sample.set_defaults(func=_sample)

    share = sub.add_parser("share", help="make your dataset public (every user may read and train on it, none may change it)")
    share.add_argument("name")
    share.add_argument("--private", action="store_true", help="make it yours alone again")
    common(share)
    share.set_defaults(func=_share)


def _run(args, work) -> object:
    async def main():
        import nats.errors

        async with connect(user_credential(args), args.prefix) as bus:
            try:
                return await work(bus.nc, bus.subjects, bus.user)
            except ValidationError as exc:  # a name the service would refuse, refused here
                raise _invalid(exc) from None
            except client.DatasetError as exc:
                raise UserError(str(exc)) from None
            except nats.errors.NoRespondersError:
                raise UserError("no dataset service is running; start one with `computeall up` (or `python -m computeall.dataset`)") from None
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                raise UserError(f"the dataset service did not answer within {args.timeout:g}s; raise --timeout or check its log") from None

    return asyncio.run(main())


def _create(args) -> int:
    expand(args.files)  # a missing file is reported before anything is sent
    if args.tokenizer_file and not Path(args.tokenizer_file).is_file():
        raise UserError(f"--tokenizer-file {args.tokenizer_file}: no such file")
    if args.tokenizer_file and Path(args.tokenizer_file).stat().st_size > TOKENIZER_FILE_BYTES:  # before it is hashed
        raise UserError(f"--tokenizer-file {args.tokenizer_file}: larger than the {TOKENIZER_FILE_BYTES:,} bytes a tokenizer may have")
    try:
        request = CreateDataset(
            name=args.name,
            files=[str(Path(f).resolve()) for f in args.files],
            vocab_size=args.vocab_size,
            split=SplitSpec.parse(args.split).model_copy(update={"name": args.split_name}),
            tokenizer_from=args.tokenizer_from,
            jsonl_field=args.jsonl_field,
            document_unit=args.document_unit,
            on_invalid_utf8="skip" if args.skip_invalid_utf8 else "error",
            seed=args.seed,
            shard_tokens=args.shard_tokens,
            if_exists="reuse" if args.reuse else "error",
        )
    except ValidationError as exc:
        raise _invalid(exc) from None
    except ValueError as exc:
        raise UserError(str(exc)) from None

    async def work(nc, subjects, user):
        sent = await send_files(nc, subjects, user, request.files, progress=not args.quiet)
        creation = request.model_copy(update={"files": sent.files, "uploads": sent.uploads})
        if args.tokenizer_file:
            tokenizer = await send_files(nc, subjects, user, [args.tokenizer_file], progress=False)
            creation = creation.model_copy(update={
                "tokenizer_file": next(iter(tokenizer.files), None), "tokenizer_upload": next(iter(tokenizer.uploads), None),
            })
        bars = _ProgressBars(enabled=not args.quiet)
        sub = await nc.subscribe(progress_subject(subjects, user, args.name), cb=bars.on_message)
        try:
            return await client.create_dataset(nc, subjects, user, creation, timeout=args.timeout)
        finally:
            await sub.unsubscribe()
            bars.close()

    manifest = _run(args, work)
    _print_manifest(manifest, args.json)
    return 0


def _list(args) -> int:
    datasets = _run(args, lambda nc, s, user: client.list_datasets(nc, s, user, timeout=args.timeout))
    if args.json:
        print(json.dumps([_summary(d) for d in datasets], indent=2))
        return 0
    if not datasets:
        print("no datasets; create one with `computeall dataset create NAME --files ...`")
    for d in datasets:
        s = _summary(d)
        splits = ", ".join(f"{k} {v:,}" for k, v in s["tokens"].items())
        whose = f"{s['owner']}{', public' if s['public'] else ''}"
        print(f"{s['name']:<24} {whose:<20} vocab {s['vocab_size']:>7,}  {s['documents']:>9,} docs  tokens: {splits}")
    return 0


def _show(args) -> int:
    manifest = _run(args, lambda nc, s, user: client.get_dataset(nc, s, user, args.name, timeout=args.timeout))
    _print_manifest(manifest, args.json)
    return 0


def _share(args) -> int:
    public = not args.private
    manifest = _run(args, lambda nc, s, user: client.share_dataset(nc, s, user, args.name, public, timeout=args.timeout))
    if args.json:
        print(json.dumps(_summary(manifest), indent=2))
    else:
        print(f"dataset {manifest['name']} is {'public: every user may read it' if manifest['public'] else 'yours alone'}")
    return 0


def _sample(args) -> int:
    def request() -> SampleRequest:
        return SampleRequest(dataset=args.name, split=args.split, n=args.n, context=args.context, seed=args.seed)

    texts = _run(args, lambda nc, s, user: client.sample_text(nc, s, user, request(), timeout=args.timeout))
    if args.json:
        print(json.dumps(texts, indent=2))
        return 0
    for i, text in enumerate(texts):
        print(f"--- sample {i} ({args.name}/{args.split}, {args.context + 1} tokens) ---")
        print(text)
    return 0


def _invalid(exc: ValidationError) -> UserError:
    return UserError("; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors()))


def _summary(manifest: dict) -> dict:
    return {
        "name": manifest["name"],
        "owner": manifest["owner"],
        "public": manifest["public"],
        "vocab_size": manifest["vocab_size"],
        "documents": manifest["documents"],
        "dtype": manifest["dtype"],
        "tokens": {name: split["tokens"] for name, split in manifest["splits"].items()},
    }


def _print_manifest(manifest: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(manifest, indent=2))
        return
    tok = manifest["tokenizer"]
    source = f"from {tok['tokenizer_from']}" if tok.get("tokenizer_from") else "trained"
    print(f"dataset   {manifest['name']} ({manifest['owner']}'s{', public' if manifest['public'] else ''})")
    print(f"vocab     {manifest['vocab_size']:,} ({source}; requested {manifest['requested_vocab_size']:,}), shards of {manifest['dtype']}")
    print(f"tokenizer digest {tok['digest']}")
    print(f"documents {manifest['documents']:,} from {len(manifest['files'])} files ({manifest['text_bytes']:,} bytes)")
    split = manifest["split"]
    print(f"split     {split['method']}:{split['fraction']} -> '{split['name']}'")
    if manifest.get("skipped_invalid_utf8"):
        print(f"skipped   {manifest['skipped_invalid_utf8']} documents with invalid UTF-8")
    for name, info in manifest["splits"].items():
        print(f"  {name:<6} {info['documents']:>9,} docs {info['tokens']:>13,} tokens  {len(info['shards'])} shards")
        for shard in info["shards"]:
            print(f"    {shard['file']:<28} {shard['tokens']:>12,} tokens  {shard['digest']}")


class _ProgressBars:
    """One tqdm bar per stage of the build, drawn from the service's progress messages."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bars = {}

    async def on_message(self, msg) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        try:
            update = DatasetProgress.model_validate_json(msg.data)
        except ValidationError:
            return  # progress is best effort; the reply carries the result
        bar = self.bars.get(update.stage)
        if bar is None:
            for done in self.bars.values():  # stages run one after another
                done.close()
            bar = self.bars[update.stage] = tqdm(total=update.total, desc=update.stage, unit=update.unit, unit_scale=True, file=sys.stderr)
        bar.update(update.done - bar.n)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()
