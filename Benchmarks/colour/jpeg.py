"""JPEG header facts that Pillow does not expose, and a Pillow open that survives broken EXIF."""
import io
import struct
from dataclasses import dataclass

import interpreter  # noqa: F401  (re-runs under Debian's python3 if Pillow or numpy is missing)
from PIL import Image

# The corpus holds one deliberately huge (99.6 MP) file; it is ours, not an attack.
Image.MAX_IMAGE_PIXELS = None


@dataclass
class Header:
    width: int
    height: int
    components: int
    adobe_transform: object  # None without an Adobe APP14 marker, else 0 (none), 1 (YCbCr), 2 (YCCK)
    icc: object  # the reassembled profile bytes, or None

    @property
    def colour(self):
        if self.components == 1:
            return "gray"
        if self.components == 3:
            return "RGB" if self.adobe_transform == 0 else "YCbCr"
        if self.components == 4:
            return "YCCK" if self.adobe_transform == 2 else "CMYK"
        return f"{self.components} components"


def _segments(data):
    """(marker, start, end) of each header segment, up to and including the first SOS."""
    if data[:2] != b"\xff\xd8":
        raise ValueError("not a JPEG (no SOI)")
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            raise ValueError(f"expected a marker at byte {pos}")
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # TEM, RSTn: no length
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2:pos + 4])
        yield marker, pos, pos + 2 + length
        if marker == 0xDA:  # start of scan: the header is over
            return
        pos += 2 + length


def header(data):
    chunks, adobe, size, components = {}, None, (0, 0), 0
    for marker, start, end in _segments(data):
        body = data[start + 4:end]
        if marker == 0xE2 and body.startswith(b"ICC_PROFILE\x00") and len(body) >= 14:
            chunks[body[12]] = body[14:]  # [12] is the 1-based sequence number, [13] the count
        elif marker == 0xEE and body.startswith(b"Adobe") and len(body) >= 12:
            adobe = body[11]
        elif 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and len(body) >= 6:
            height, width = struct.unpack(">HH", body[1:5])
            size, components = (width, height), body[5]
    icc = b"".join(chunks[k] for k in sorted(chunks)) if chunks else None
    return Header(size[0], size[1], components, adobe, icc)


def without_exif(data):
    """The same JPEG with its APP1 Exif segments cut out."""
    out, last = [], 0
    for marker, start, end in _segments(data):
        if marker == 0xE1 and data[start + 4:start + 10] == b"Exif\x00\x00":
            out.append(data[last:start])
            last = end
    out.append(data[last:])
    return b"".join(out)


def open_photo(path):
    """Pillow image of a JPEG, and whether its EXIF had to be dropped.

    Pillow 9.4 refuses a whole file whose EXIF block is truncated (it parses EXIF while reading
    the header); such a file's orientation is unknowable, so it is read as 1, as Enlarger does.
    """
    try:
        return Image.open(path), False
    except (SyntaxError, OSError, ValueError):
        with open(path, "rb") as f:
            data = f.read()
        return Image.open(io.BytesIO(without_exif(data))), True
