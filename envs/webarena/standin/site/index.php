<?php
require 'db.php';
$rows = '';
foreach (db()->query('SELECT id, name, price FROM products ORDER BY id') as $p) {
    $rows .= sprintf('<tr><td>%s</td><td class="price">$%s</td><td><a href="/order.php?product=%d">Order</a></td></tr>',
                     htmlspecialchars($p['name']), $p['price'], $p['id']);
}
page('Stand-in shop', "<table id=\"products\">$rows</table>");
