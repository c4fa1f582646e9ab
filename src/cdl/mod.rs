//! CDL, the text form of netCDF: the writer behind `dump` (ncdump's output byte for byte) and
//! the parser behind `gen` (ncgen's input).

pub mod fmt;
pub mod writer;

pub mod lexer;
pub mod parser;
pub mod special;
pub mod times;
mod values;
