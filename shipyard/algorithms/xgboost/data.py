"""The channels' data as the built-in XGBoost algorithm reads it (sagemaker-xgboost-container, data_utils.py):
every file under the channel's directory (names starting with '.' or '_' are not data), in the channel's
ContentType from inputdataconfig.json:

    text/csv, csv (text/csv;label_size=1)    label in the first column, no header; with csv_weights=1 the
                                             instance weight in the second
    libsvm, text/libsvm, text/x-libsvm       `label index:value ...`; the default when no ContentType is given
    application/x-parquet, parquet           label in the first column

SageMaker's container reads the validation channel in the train channel's content type; here each channel
is read in its own (a validation channel in another format is read, not misparsed)."""

from __future__ import annotations

from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import Any

from shipyard.errors import ValidationError

CSV, LIBSVM, PARQUET = "csv", "libsvm", "parquet"
CONTENT_TYPES = {
    "csv": CSV, "text/csv": CSV,
    "libsvm": LIBSVM, "text/libsvm": LIBSVM, "text/x-libsvm": LIBSVM,
    "parquet": PARQUET, "application/x-parquet": PARQUET,
}
ACCEPTED = "'text/csv', 'csv', 'libsvm', 'text/libsvm', 'text/x-libsvm', 'application/x-parquet', 'parquet'"


def content_type(value: str | None, channel: str = "train") -> str:
    """The format a channel's ContentType names; libsvm when none is given (SageMaker's default)."""
    field = f"channel {channel}: content_type"
    if value is None:
        return LIBSVM
    message = Message()
    message["content-type"] = value
    base, params = message.get_content_type(), dict(message.get_params()[1:])
    if value.strip().lower() in CONTENT_TYPES:   # 'csv' has no '/', which the parser would turn into text/plain
        base = value.strip().lower()
    if base not in CONTENT_TYPES:
        if "recordio" in value.lower():
            raise ValidationError(field, value, f"RecordIO-protobuf is not supported by shipyard's built-in "
                                  f"XGBoost; convert the data to one of {ACCEPTED}")
        raise ValidationError(field, value, f"not a content type the XGBoost algorithm reads; use one of {ACCEPTED}")
    if CONTENT_TYPES[base] == CSV and params.get("label_size", "1") != "1":
        raise ValidationError(field, value, "label_size must be 1 (the label is the first column)")
    return CONTENT_TYPES[base]


def check_channels(channels: dict[str, dict]) -> dict[str, str]:
    """{channel: its format} for the channels as inputdataconfig.json gives them ({name: {"ContentType",
    "TrainingInputMode", ...}}): `train` and optionally `validation`, read from files. The SDK checks a job's
    channels with it before anything runs, the algorithm again on the instance."""
    unknown = sorted(set(channels) - {"train", "validation"})
    if unknown:
        raise ValidationError("channels", unknown, "the XGBoost algorithm reads 'train' and 'validation' only; "
                              "rename or remove the others")
    if "train" not in channels:
        raise ValidationError("channels", sorted(channels), "the XGBoost algorithm needs a 'train' channel, e.g. "
                              "fit({'train': TrainingInput(..., content_type='text/csv')})")
    kinds = {}
    for name in ("train", "validation"):
        if name not in channels:
            continue
        if channels[name].get("TrainingInputMode", "File") == "Pipe":
            raise ValidationError(f"channel {name}: input_mode", "Pipe", "shipyard's built-in XGBoost reads files; "
                                  "use input_mode='File' or 'FastFile'")
        kinds[name] = content_type(channels[name].get("ContentType"), name)
    return kinds


def data_files(directory: Path) -> list[Path]:
    return sorted(p for p in Path(directory).rglob("*") if p.is_file()
                  and not any(part.startswith((".", "_")) for part in p.relative_to(directory).parts))


@dataclass
class Data:
    features: Any        # a dense array, or scipy's CSR matrix for libsvm
    labels: Any
    weights: Any = None

    @property
    def rows(self) -> int:
        return self.features.shape[0]

    @property
    def columns(self) -> int:
        return self.features.shape[1]


def load(directory: Path, kind: str, channel: str, csv_weights: bool = False) -> Data | None:
    """The channel's rows on this host (None: no data files here, e.g. a ShardedByS3Key channel of fewer
    objects than hosts)."""
    files = data_files(directory)
    if not files:
        return None
    if kind == LIBSVM:
        return _libsvm(files, channel)
    import numpy as np
    import pandas as pd

    frames = [_csv(path, channel) if kind == CSV else _parquet(path, channel) for path in files]
    values = pd.concat(frames, ignore_index=True).to_numpy(dtype=np.float32)
    first = 2 if csv_weights and kind == CSV else 1
    if values.shape[1] <= first:
        raise ValidationError(f"channel {channel}", str(files[0]), f"has {values.shape[1]} columns: the label first"
                              + (", the weight second" if first == 2 else "") + ", then at least one feature")
    return Data(values[:, first:], values[:, 0], values[:, 1] if first == 2 else None)


def _csv(path: Path, channel: str):
    import pandas as pd

    try:
        frame = pd.read_csv(path, header=None)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    non_numeric = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
    if non_numeric:
        first = ",".join(str(v) for v in frame.iloc[0].tolist())[:60]
        raise ValidationError(f"channel {channel}", str(path), f"is not numeric CSV (first line {first!r}): the "
                              "algorithm reads the label first and no header line; remove the header or fix the rows")
    return frame


def _parquet(path: Path, channel: str):
    import pandas as pd

    try:
        return pd.read_parquet(path)
    except Exception as exc:   # pyarrow's errors have no common base worth naming
        raise ValidationError(f"channel {channel}", str(path), f"is not a Parquet file ({exc})") from None


def _libsvm(files: list[Path], channel: str) -> Data:
    """`label[:weight] [index:value ...]` per line, indices as XGBoost reads them (the column number itself),
    comments after `#`."""
    import numpy as np
    from scipy import sparse

    labels, weights, indptr, indices, values = [], [], [0], [], []
    for path in files:
        with open(path) as handle:
            for number, text in enumerate(handle, 1):
                fields = text.split("#", 1)[0].split()
                if not fields:
                    continue
                try:
                    label, _, weight = fields[0].partition(":")   # label[:weight], as XGBoost's parser reads it
                    labels.append(float(label))
                    weights.append(float(weight) if weight else 1.0)
                    for item in fields[1:]:
                        index, _, value = item.partition(":")
                        if index == "qid":
                            raise ValidationError(f"channel {channel}", f"{path}:{number}", "qid (ranking groups) "
                                                  "is not supported by shipyard's built-in XGBoost yet; remove it")
                        indices.append(int(index))
                        values.append(float(value))
                except ValidationError:
                    raise
                except ValueError:
                    raise ValidationError(f"channel {channel}", f"{path}:{number}", f"line {text.strip()[:60]!r} is "
                                          "not libsvm ('label index:value ...'); check the channel's content_type"
                                          ) from None
                indptr.append(len(indices))
    columns = max(indices, default=-1) + 1
    matrix = sparse.csr_matrix((np.asarray(values, dtype=np.float32), np.asarray(indices), np.asarray(indptr)),
                               shape=(len(labels), columns))
    given = np.asarray(weights, dtype=np.float32)
    return Data(matrix, np.asarray(labels, dtype=np.float32), given if (given != 1.0).any() else None)


def dmatrix(data: Data, columns: int):
    """XGBoost's matrix of `data`, `columns` wide (the widest channel's: libsvm rows need not name the last
    features, and every channel must have the model's width)."""
    import xgboost

    features = data.features
    if data.columns < columns:
        if not hasattr(features, "tocsr"):
            raise ValidationError("channels", data.columns, f"a channel has {data.columns} feature columns where "
                                  f"another has {columns}; give every channel the same features")
        features = features.tocsr().copy()
        features.resize((data.rows, columns))
    return xgboost.DMatrix(features, label=data.labels, weight=data.weights)
