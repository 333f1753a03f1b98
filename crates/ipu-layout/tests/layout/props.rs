//! Properties (filled below).
