<?php
require 'db.php';
$rows = ''; $total = 0.0; $n = 0;
foreach (db()->query('SELECT o.id, p.name, o.qty, p.price * o.qty AS amount FROM orders o JOIN products p ON p.id = o.product_id ORDER BY o.id') as $o) {
    $rows .= sprintf('<tr><td>#%d</td><td>%s</td><td>%d</td><td>$%s</td></tr>', $o['id'], htmlspecialchars($o['name']),
                     $o['qty'], $o['amount']);
    $total += $o['amount']; $n++;
}
page('My orders', sprintf('<p id="summary">%d orders, total $%.2f</p><table id="orders">%s</table>', $n, $total, $rows));
