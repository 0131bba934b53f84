"""NATS subjects as the server sees them: validation, matching, overlap and subject transforms,
for one subject at a time or vectorised over Arrow columns."""

from __future__ import annotations

from jsspark.subjects.hashing import fnv1a_32, fnv1a_32_array
from jsspark.subjects.mapping import validate_mapping
from jsspark.subjects.tokens import (
    is_literal,
    is_valid_asset_name,
    is_valid_literal_subject,
    is_valid_publish_subject,
    is_valid_subject,
    subject_is_subset_match,
    subject_matches,
    subject_text,
    subjects_collide,
    validate_asset_name,
)
from jsspark.subjects.transform import SubjectTransform
from jsspark.subjects.vectorized import match_filter

__all__ = [
    "SubjectTransform",
    "fnv1a_32",
    "fnv1a_32_array",
    "is_literal",
    "is_valid_asset_name",
    "is_valid_literal_subject",
    "is_valid_publish_subject",
    "is_valid_subject",
    "match_filter",
    "subject_is_subset_match",
    "subject_matches",
    "subject_text",
    "subjects_collide",
    "validate_asset_name",
    "validate_mapping",
]
