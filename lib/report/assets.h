// Files embedded into the program at build time (cmake/EmbedFiles.cmake generates the
// definitions from lib/report/assets/), for the HTML report.
#pragma once

#include <string_view>  // std::string_view

namespace fp8t::report::assets {

std::string_view chart_js();    // Chart.js 3.9.1, minified (lib/report/assets/chart.min.js, MIT)
std::string_view report_js();   // lib/report/assets/report.js: draws the charts
std::string_view report_css();  // lib/report/assets/report.css

}  // namespace fp8t::report::assets
