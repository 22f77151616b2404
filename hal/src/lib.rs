//! rtapi-hal: the shared-memory HAL segment (skeleton; see issue 3).
