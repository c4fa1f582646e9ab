//! CDL, the text form of netCDF: the writer behind `dump` (ncdump's output byte for byte) and
//! the parser behind `gen` (ncgen's input).
