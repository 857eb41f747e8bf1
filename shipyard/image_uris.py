"""`image_uris.retrieve`, as SageMaker's SDK (`sagemaker.image_uris.retrieve`): the URI of a SageMaker image
for a region and version, built from the image catalog (spec/images.py) so that an Estimator given it knows
what it runs. Only training images are known here."""

from __future__ import annotations

from typing import Any

from shipyard.errors import ValidationError, unknown_name_error

# retrieve()'s arguments that choose among variants of an image shipyard has one of (a training image runs
# here on whatever the instance has): accepted, as they are by SageMaker's SDK for these images.
VARIANT_ARGUMENTS = ("py_version", "instance_type", "accelerator_type", "container_version", "sdk_version")
SCOPES = ("training",)


def retrieve(framework: str, region: str | None = None, version: str | None = None, py_version: str | None = None,
             instance_type: str | None = None, accelerator_type: str | None = None, image_scope: str | None = None,
             container_version: str | None = None, sdk_version: str | None = None, **unsupported: Any) -> str:
    """The image URI of `framework` (e.g. "xgboost") `version` (e.g. "1.7-1") in `region`."""
    from shipyard.spec.images import catalog

    images = {name: image for name, image in catalog().items() if image.registries}   # those with URIs to build
    if framework not in images:
        raise unknown_name_error("framework", framework, images)
    for name, value in unsupported.items():
        if value is not None:
            raise ValidationError(name, value, "not supported by shipyard's image_uris.retrieve; remove it")
    if image_scope not in (None, *SCOPES):
        raise ValidationError("image_scope", image_scope, "shipyard runs training jobs only; use "
                              "image_scope='training' or leave it out")
    image = images[framework]
    if version is None:
        raise ValidationError("version", None, f"give the {framework} version, one of {', '.join(image.versions)}")
    if str(version) not in image.versions:
        raise unknown_name_error("version", str(version), image.versions)
    if region is None:
        raise ValidationError("region", None, "give the region whose URI to build, e.g. region='us-west-2' "
                              "(shipyard has no AWS session to take it from)")
    if region not in image.registries:
        raise unknown_name_error("region", region, image.registries)
    return image.uri(region, str(version))
