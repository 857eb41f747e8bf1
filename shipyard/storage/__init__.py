"""Object storage for shipyard: any fsspec URI (plain paths, file://, s3:// through s3fs), transfers
between it and local directories, and the tarballs the SageMaker contract moves around."""
