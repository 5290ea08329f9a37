"""``python -m enlarger keygen NAME [--directory DIR] [--force]``: a CURVE key pair, the
files `enlarger keygen` writes (see `enlarger.keys.generate_key_pair`)."""

from __future__ import annotations

import argparse
import sys

from .errors import KeyFileError
from .keys import generate_key_pair


def main(arguments: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m enlarger", description="Tools of the Enlarger Python client.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    keygen = commands.add_parser(
        "keygen", help="create a CURVE key pair: NAME.key (secret) and NAME.pub (public)",
        description="Create a CURVE key pair, in the format of `enlarger keygen`: NAME.key holds the public and "
                    "the secret key (mode 0600; it stays with the process that uses it), NAME.pub the public key "
                    "(safe to copy anywhere). A client's .pub goes into the broker's client allow-list directory "
                    "(--client-keys); the client connects with key=NAME.key and the broker's .pub.")
    keygen.add_argument("name", metavar="NAME", help="letters, digits, '.', '_', '-'; the files are NAME.key and "
                                                     "NAME.pub")
    keygen.add_argument("--directory", default=".", help="where to write the files; created with mode 0700 if "
                                                         "missing (default: .)")
    keygen.add_argument("--force", action="store_true", help="replace existing NAME.key and NAME.pub")
    options = parser.parse_args(arguments)
    try:
        paths = generate_key_pair(options.name, options.directory, force=options.force)
    except (ValueError, KeyFileError) as error:
        print(f"{parser.prog} keygen: {error}", file=sys.stderr)
        return 1
    print(f"wrote {paths.key_file} (key pair, secret, mode 0600)")
    print(f"wrote {paths.public_key_file} (public key {paths.public_key})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
