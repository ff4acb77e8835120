// Boost.JSON's compiled part, in exactly one translation unit of the engine
// (the library is header-only this way: no libboost_json to link).
#include <boost/json/src.hpp>
